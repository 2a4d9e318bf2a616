"""One bounded exchange with the API server: a wall-clock deadline, a body cap, JSON that cannot recurse.

``requests`` gives a timeout per socket read, so a server that answers one byte at a time holds a call for
as long as it likes (and a SIGTERM with it: the signal handler only sets a flag). Here every request runs
under a ``Watchdog``: a thread that shuts the request's sockets down when the deadline passes (connect,
TLS handshake, headers and the whole body together) or when ``stop()`` turns true (init's ``Shutdown``), so
the blocked read returns at once. The sockets are registered by the connection classes of this module's
adapter (urllib3's ``ConnectionCls`` extension point), for new and reused connections alike. Only a DNS
look-up cannot be interrupted; the in-cluster server is an IP address.

The body is read in chunks up to ``MAX_BODY`` and not decompressed (``Accept-Encoding: identity``): a
compressed answer cannot grow past the cap after it was counted.
"""

from __future__ import annotations

import contextlib
import contextvars
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from driver_container.errors import ApiAnswerError, JsonFormatError
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
        return ApiAnswerError(_describe(cause), retry=not isinstance(cause, requests.exceptions.SSLError))


def _shut(sock: socket.socket) -> None:
    # The plain socket's shutdown, also for an SSLSocket: the blocked TLS read sees the end of the stream
    # without the TLS object being torn down under it from this thread.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


_ACTIVE: contextvars.ContextVar[Watchdog | None] = contextvars.ContextVar("kube_request_watchdog", default=None)


def _register(sock: socket.socket | None) -> None:
    watchdog = _ACTIVE.get()
    if watchdog is not None and sock is not None:
        watchdog.register(sock)


class _Connection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _register(sock)  # before the TLS handshake: a dribbled handshake is cut off too
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _register(self.sock)  # a connection reused from the pool
        super().request(*args, **kwargs)


class _TlsConnection(HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _register(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _register(self.sock)
        super().request(*args, **kwargs)


class _Pool(HTTPConnectionPool):
    ConnectionCls = _Connection


class _TlsPool(HTTPSConnectionPool):
    ConnectionCls = _TlsConnection


_POOLS: dict[str, type[HTTPConnectionPool]] = {"http": _Pool, "https": _TlsPool}


class DeadlineAdapter(HTTPAdapter):
    """requests' adapter with pools whose connections register their sockets with the active watchdog."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **kwargs)
        manager.pool_classes_by_scheme = _POOLS
        return manager


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
            response = session.request(method, url, headers=headers, stream=True, timeout=(seconds, seconds), **kwargs)
        except requests.RequestException as exc:
            raise watchdog.failure(exc) from exc
        with response:
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
    except (urllib3.exceptions.HTTPError, requests.RequestException, OSError) as exc:
        raise watchdog.failure(exc) from exc
    return b"".join(chunks)


def _describe(exc: BaseException | None) -> str:
    if isinstance(exc, requests.Timeout):
        return "timed out"
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS verification failed"
    return f"connection failed ({type(exc).__name__})"
