"""One bounded exchange with the API server: a wall-clock deadline, a body cap, JSON that cannot recurse.

``requests`` gives a timeout per socket read, so a server that answers one byte at a time holds a call for
as long as it likes (and a SIGTERM with it: the signal handler only sets a flag). Here every request runs
under a ``Watchdog``: a thread that shuts the request's sockets down when the deadline passes (connect,
TLS handshake, headers and the whole body together) or when ``stop()`` turns true (init's ``Shutdown``), so
the blocked read returns at once. The sockets are registered by the connection classes of session.py's
adapter (urllib3's ``ConnectionCls`` extension point), for new and reused connections alike. Only a DNS
look-up cannot be interrupted; the in-cluster server is an IP address.

The body is read in chunks up to ``MAX_BODY`` and not decompressed (``Accept-Encoding: identity``): a
compressed answer cannot grow past the cap after it was counted. No redirect is followed (session.py's
``ApiSession``, and ``allow_redirects=False``): an API server does not redirect these calls, so a 3xx is an
error naming its target, its body unread. Whatever else the stack raises on a malformed answer
(ValueError, RuntimeError, an http.client error) is an ``ApiAnswerError`` too.
"""

from __future__ import annotations

import contextlib
import contextvars
import http.client
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import requests
import urllib3

from driver_container.base.errors import ApiAnswerError, JsonFormatError
from driver_container.formats.boundedjson import decode_json
from driver_container.formats.numbers import parse_uint
from driver_container.runtime.forkchild import HANDLED_SIGNALS

# A Node is capped by etcd's 1.5 MiB object limit (etcd --max-request-bytes default); the pod list of one
# node is at most maxPods (110 by default) pods of ~10-50 KiB with managedFields. 16 MiB holds both with
# room, and keeps a hostile answer from growing the manager (or init's Node report) without bound.
MAX_BODY = 16 << 20  # bytes
# managedFields nest one level per field path (a Pod's reach ~15 levels, Kubernetes
# staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go FieldsV1); a list adds two: 64 leaves room.
API_MAX_DEPTH = 64
CHUNK = 64 << 10
TICK_S = 0.05  # how often the watchdog looks at the deadline and stop(): a stop ends a request within this


def _stopped() -> ApiAnswerError:
    return ApiAnswerError("stopped by a termination signal", retry=False, stopped=True)


class Watchdog:
    """Shuts the sockets of one request down when its deadline passes or ``stop()`` turns true."""

    def __init__(self, seconds: float, stop: Callable[[], bool] | None) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.fired: str | None = None  # "deadline" or "stop"
        self._stop = stop
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kube-request-watchdog", daemon=True)
        self._token: contextvars.Token[Watchdog | None] | None = None

    def __enter__(self) -> Watchdog:
        self._token = _ACTIVE.set(self)
        # The thread starts with the termination signals blocked, so the kernel delivers them to the main
        # thread: its blocked read is interrupted, the Python handler runs and sets the flag stop() reads.
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
        try:
            self._thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        if self._token is not None:
            _ACTIVE.reset(self._token)

    def _run(self) -> None:
        while not self._done.wait(TICK_S):
            if self._stop is not None and self._stop():
                self._fire("stop")
            elif time.monotonic() >= self.deadline:
                self._fire("deadline")
            else:
                continue
            return

    def _fire(self, why: str) -> None:
        with self._lock:
            self.fired = why
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def register(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            fired = self.fired is not None
        if fired:
            _shut(sock)

    def failure(self, cause: BaseException | None = None) -> ApiAnswerError:
        """What a broken exchange means: the watchdog's doing, or ``cause`` itself."""
        if self.fired == "stop":
            return _stopped()
        if self.fired == "deadline" or time.monotonic() >= self.deadline:
            return ApiAnswerError(f"no complete answer within {self.seconds:g} s", retry=True)
        # A certificate that does not verify, or an answer the stack cannot parse, will not be better next time.
        settled = isinstance(cause, requests.exceptions.SSLError) or _malformed(cause)
        return ApiAnswerError(_describe(cause), retry=not settled)


def _shut(sock: socket.socket) -> None:
    # The plain socket's shutdown, also for an SSLSocket: the blocked TLS read sees the end of the stream
    # without the TLS object being torn down under it from this thread.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


_ACTIVE: contextvars.ContextVar[Watchdog | None] = contextvars.ContextVar("kube_request_watchdog", default=None)


def register_socket(sock: socket.socket | None) -> None:
    """Hand ``sock`` to the watchdog of the request in progress (session.py's connections call this)."""
    watchdog = _ACTIVE.get()
    if watchdog is not None and sock is not None:
        watchdog.register(sock)


class Answer:
    """Status, reason, headers and the whole (capped) body of one exchange."""

    def __init__(self, status: int, reason: str, headers: Mapping[str, str], body: bytes) -> None:
        self.status_code, self.reason, self.headers, self.body = status, reason, headers, body

    def json(self) -> object:
        """The body as JSON; ``ApiAnswerError`` (not retried) for anything else, nesting too deep included."""
        try:
            return decode_json(self.body, limit=MAX_BODY, max_depth=API_MAX_DEPTH)
        except JsonFormatError as exc:
            raise ApiAnswerError(f"the answer is {exc}", retry=False) from exc


def exchange(
    session: requests.Session,
    method: str,
    url: str,
    *,
    seconds: float,
    stop: Callable[[], bool] | None,
    max_body: int = MAX_BODY,
    **kwargs: Any,
) -> Answer:
    """One request within ``seconds`` of wall-clock time, its body at most ``max_body`` bytes."""
    if stop is not None and stop():
        raise _stopped()
    headers = {**(kwargs.pop("headers", None) or {}), "Accept-Encoding": "identity"}
    with Watchdog(seconds, stop) as watchdog:
        try:
            response = session.request(
                method, url, headers=headers, stream=True, timeout=(seconds, seconds), allow_redirects=False, **kwargs
            )
        except _ANSWER_FAILURES as exc:
            raise watchdog.failure(exc) from exc
        with response:
            _refuse_redirect(response)
            body = _read_body(response, watchdog, max_body)
        if watchdog.fired is not None:
            raise watchdog.failure()
    return Answer(response.status_code, str(response.reason or ""), response.headers, body)


def _read_body(response: requests.Response, watchdog: Watchdog, max_body: int) -> bytes:
    declared = parse_uint(response.headers.get("Content-Length", "").strip())
    if declared is not None and declared > max_body:
        raise ApiAnswerError(f"the answer is larger than {max_body} bytes ({declared} declared)", retry=False)
    chunks: list[bytes] = []
    total = 0
    try:
        while chunk := response.raw.read(CHUNK, decode_content=False):
            total += len(chunk)
            if total > max_body:
                raise ApiAnswerError(f"the answer is larger than {max_body} bytes", retry=False)
            chunks.append(chunk)
            if watchdog.fired is not None:
                raise watchdog.failure()
    except _ANSWER_FAILURES as exc:
        raise watchdog.failure(exc) from exc
    return b"".join(chunks)


def _refuse_redirect(response: requests.Response) -> None:
    """A 3xx is refused before a byte of its body is read (``with response`` closes the connection)."""
    if not 300 <= response.status_code < 400:
        return
    location = response.headers.get("Location", "")
    shown = repr(location if len(location) <= 256 else location[:256] + "...")
    raise ApiAnswerError(
        f"the server answered {response.status_code} {response.reason or ''} redirecting to {shown}; "
        "a Kubernetes API server does not redirect, so no redirect is followed",
        retry=False,
        fix="point the server URL at the API server itself, not at a proxy or load balancer that redirects",
    )


# What a broken connection or a malformed answer raises from requests, urllib3, http.client or ssl
# (ValueError and RuntimeError too: urllib3 raises both on some malformed bodies), never a traceback.
_ANSWER_FAILURES = (
    requests.RequestException,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    OSError,
    ValueError,
    RuntimeError,
)


def _describe(exc: BaseException | None) -> str:
    if isinstance(exc, requests.Timeout):
        return "timed out"
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS verification failed"
    if _malformed(exc):
        return f"malformed answer ({type(exc).__name__})"
    return f"connection failed ({type(exc).__name__})"


def _malformed(exc: BaseException | None) -> bool:
    """A ValueError or RuntimeError from the stack (a header, URL or body it cannot parse)."""
    return isinstance(exc, ValueError | RuntimeError) and not isinstance(exc, requests.RequestException)
