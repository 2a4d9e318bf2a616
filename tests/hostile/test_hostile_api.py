"""A hostile or broken Kubernetes API server: answers dribbled a byte at a time, malformed answers (JSON
nested 100 000 deep, a list where an object belongs, not JSON at all), answers far beyond any Node,
redirects whose bodies are gzip bombs or truncated gzip, a kubeconfig naming a FIFO as its CA, client
certificate or key, and a plain-HTTP server that would read the bearer token.

The client (kube/client.py, kube/transport.py) must end every request at its wall-clock deadline
(connect and the whole answer), end it within 50 ms of a stop (init's SIGTERM), read at most 16 MiB,
turn every malformed answer into a KubernetesError, and never send a credential over http://. init's
Node report must never fail init, hold a SIGTERM past 2 s, or skip the check of the root after Ready.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import resource
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers.hostenv import Host, make_host
from helpers.tls import self_signed
from helpers.waits import wait_until

from driver_container.base.errors import KubernetesError
from driver_container.kube.client import KubeClient
from driver_container.kube.endpoint import Endpoint, KubeConfig
from driver_container.kube.nodereport import READY, NodeVerdict, report
from driver_container.settings import Cluster

TOKEN = "hostile-api-token-value"
NODE = "node-1"
NODE_JSON = {"kind": "Node", "metadata": {"name": NODE, "labels": {"a": "b"}}}
DRIP_BYTES = 300  # one every 0.1 s: a 30 s answer whose every read arrives well within any read timeout
HUGE = 64 << 20  # four times the client's 16 MiB cap
BOMB_MEMBER = 16 << 20  # zeros per gzip member; 64 members: 1 GiB once decompressed, ~1 MiB on the wire
BOMB_MEMBERS = 64


@functools.cache
def _gzip_bomb() -> bytes:
    """1 GiB of zeros as 64 concatenated gzip members (one stream to a decoder): made once, ~1 MiB."""
    return gzip.compress(bytes(BOMB_MEMBER), compresslevel=9) * BOMB_MEMBERS


@dataclass
class Api:
    mode: str = "node"
    url: str = ""
    ca: Path | None = None
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    sent: int = 0  # body bytes the server managed to write


class _Handler(BaseHTTPRequestHandler):
    api: Api

    def log_message(self, *args: object) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.api.seen.append((self.command, self.path, dict(self.headers)))
        self.api.arrived.set()
        with contextlib.suppress(OSError):  # the client gave up (BrokenPipe, reset, TLS EOF): what a test wants
            getattr(self, "_" + self.api.mode)()

    do_GET = do_PATCH = do_POST = _serve  # noqa: N815

    def _body(self, data: bytes, *, length: bool = True) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if length:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _node(self) -> None:
        self._body(json.dumps(NODE_JSON).encode())

    def _drip(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(DRIP_BYTES))
        self.end_headers()
        self.wfile.flush()
        for _ in range(DRIP_BYTES):
            self.wfile.write(b" ")
            time.sleep(0.1)

    def _drip_headers(self) -> None:
        self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        for _ in range(DRIP_BYTES):
            self.wfile.write(b"a")
            time.sleep(0.1)

    def _deep(self) -> None:
        self._body(b'{"kind":"Node","metadata":' + b"[" * 100_000 + b"]" * 100_000 + b"}")

    def _list(self) -> None:
        self._body(b"[]")

    def _labels_list(self) -> None:
        self._body(b'{"kind":"Node","metadata":{"labels":["a"]}}')

    def _metadata_text(self) -> None:
        self._body(b'{"kind":"Node","metadata":"x"}')

    def _html(self) -> None:
        self._body(b"<html><body>502 Bad Gateway</body></html>")

    def _refused(self, data: bytes) -> None:
        self.send_response(403)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _forbidden_deep(self) -> None:
        self._refused(b'{"kind":"Status","details":' + b"[" * 100_000 + b"]" * 100_000 + b"}")

    def _forbidden_list(self) -> None:
        self._refused(b'["Forbidden"]')

    def _forbidden_long(self) -> None:
        self._refused(json.dumps({"kind": "Status", "message": "m" * 100_000}).encode())

    def _pods_bad(self) -> None:
        self._body(b'{"kind":"PodList","items":[{"metadata":[]}]}')

    def _huge(self, *, length: bool = True) -> None:
        head, tail = b'{"kind":"Node","metadata":{"name":"node-1","labels":{"a":"', b'"}}}'
        self.send_response(200)
        if length:
            self.send_header("Content-Length", str(len(head) + HUGE + len(tail)))
        self.end_headers()
        self.wfile.write(head)
        block = b"x" * (1 << 20)
        for _ in range(HUGE >> 20):
            self.wfile.write(block)
            self.api.sent += len(block)
        self.wfile.write(tail)

    def _huge_unsized(self) -> None:
        self._huge(length=False)  # HTTP/1.0 and no Content-Length: the body ends when the server closes

    def _gzip_answer(self, status: int, data: bytes, *, declared: int | None = None) -> None:
        self.send_response(status)
        if status != 200:
            self.send_header("Location", "/bomb")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(data) if declared is None else declared))
        self.end_headers()
        self.wfile.write(data)
        self.api.sent += len(data)

    def _redirect_bomb(self) -> None:
        """A 302 whose own body is a gzip bomb, to a target that is one too."""
        self._gzip_answer(200 if self.path == "/bomb" else 302, _gzip_bomb())

    def _redirect_truncated(self) -> None:
        """A 302 whose gzip body ends halfway through (the connection closes after it: HTTP/1.0)."""
        whole = gzip.compress(json.dumps(NODE_JSON).encode() * 100)
        self._gzip_answer(200 if self.path == "/bomb" else 302, whole[: len(whole) // 2], declared=len(whole))


def _serve(api: Api, context: ssl.SSLContext | None) -> ThreadingHTTPServer:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Handler,), {"api": api}))
    httpd.daemon_threads = True
    httpd.handle_error = lambda request, address: None  # type: ignore[method-assign]
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    scheme = "https" if context is not None else "http"
    api.url = f"{scheme}://127.0.0.1:{httpd.server_address[1]}"
    return httpd


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def api(cert: tuple[Path, Path]) -> Iterator[Api]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*cert)
    state = Api(ca=cert[0])
    httpd = _serve(state, context)
    yield state
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def plain_api() -> Iterator[Api]:
    state = Api()
    httpd = _serve(state, None)
    yield state
    httpd.shutdown()
    httpd.server_close()


def _client(api: Api, timeout: float = 1.0, stop: Callable[[], bool] | None = None) -> KubeClient:
    endpoint = Endpoint(api.url, verify=str(api.ca), token=TOKEN)
    hook = {"stop": stop} if stop is not None else {}  # (only where a test needs it)
    return KubeClient(endpoint, KubeConfig(timeout=timeout, attempts=1), **hook)


def _kubeconfig(path: Path, api: Api, user: dict[str, str]) -> Path:
    cluster = {"server": api.url, **({"certificate-authority": str(api.ca)} if api.ca else {})}
    path.write_text(
        json.dumps(
            {
                "clusters": [{"name": "c", "cluster": cluster}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": user}],
                "current-context": "x",
            }
        )
    )
    return path


# -- the deadline and the stop ----------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["drip", "drip_headers"])
def test_a_dribbled_answer_ends_at_the_deadline(api: Api, mode: str) -> None:
    """Every read arrives within 0.1 s, so a per-read timeout never fires: only a deadline ends it."""
    api.mode = mode
    started = time.monotonic()
    with _client(api) as client, pytest.raises(KubernetesError) as caught:
        client.get_node(NODE)
    took = time.monotonic() - started
    assert took < 1.6, f"the 1 s request took {took:.1f} s"
    assert "no complete answer within 1 s (1 attempt(s))" in caught.value.message


@pytest.mark.timeout(60)
def test_a_stop_ends_the_request_in_flight(api: Api) -> None:
    """init's SIGTERM (Shutdown.requested) ends a request long before its deadline."""
    api.mode = "drip"
    stop = threading.Event()
    stopped_at: list[float] = []

    def press() -> None:
        if api.arrived.wait(30):
            time.sleep(0.3)
            stopped_at.append(time.monotonic())
            stop.set()

    threading.Thread(target=press, daemon=True).start()
    with _client(api, timeout=30, stop=stop.is_set) as client, pytest.raises(KubernetesError) as caught:
        client.get_node(NODE)
    assert stopped_at, "the request never reached the server"
    assert time.monotonic() - stopped_at[0] < 0.5
    assert "stopped by a termination signal" in caught.value.message


# -- malformed and oversized answers ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "call", "what"),
    [
        ("deep", "node_labels", "levels deep (at most 64)"),
        ("list", "get_node", "a JSON list, not an object"),
        ("labels_list", "node_labels", "metadata.labels is not a mapping of strings"),
        ("metadata_text", "node_labels", "metadata.labels is not a mapping of strings"),
        ("html", "get_node", "not JSON"),
        ("pods_bad", "list_pods", "items is not a list of pods"),
    ],
)
def test_a_malformed_answer_is_a_kubernetes_error(api: Api, mode: str, call: str, what: str) -> None:
    api.mode = mode
    with _client(api) as client, pytest.raises(KubernetesError) as caught:
        if call == "list_pods":
            client.list_pods(None, node=NODE)
        else:
            getattr(client, call)(NODE)
    assert "malformed answer" in caught.value.message and what in caught.value.message
    assert caught.value.fix is not None and "Kubernetes API server" in caught.value.fix


@pytest.mark.parametrize("mode", ["forbidden_deep", "forbidden_list", "forbidden_long"])
def test_a_refusal_with_a_malformed_body_still_names_its_status(api: Api, mode: str) -> None:
    """The error path reads the Status message too: a deep or list body raised RecursionError or
    AttributeError there, and a 100 000-character message went whole into the error line."""
    api.mode = mode
    with _client(api) as client, pytest.raises(KubernetesError) as caught:
        client.patch_node_labels(NODE, {"a": "b"})
    assert caught.value.status == 403 and caught.value.message.startswith(f"PATCH /api/v1/nodes/{NODE}: 403 Forbidden")
    assert len(caught.value.message) < 600
    assert caught.value.fix is not None and "grant" in caught.value.fix


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["huge", "huge_unsized"])
def test_an_answer_beyond_the_cap_is_not_read(api: Api, mode: str) -> None:
    api.mode = mode
    with _client(api, timeout=20) as client, pytest.raises(KubernetesError, match="larger than 16777216 bytes"):
        client.get_node(NODE)
    time.sleep(0.2)  # the server's last write fails once the client has closed
    assert api.sent < 32 << 20, f"the server wrote {api.sent >> 20} MiB"


@pytest.mark.parametrize("mode", ["deep", "list", "html"])
def test_the_node_report_survives_a_malformed_answer(api: Api, mode: str, caplog: pytest.LogCaptureFixture) -> None:
    api.mode = mode
    env = {"NODE_NAME": NODE, "KUBERNETES_SERVICE_HOST": "set"}
    assert (
        report(NodeVerdict(READY, "595.91.07"), Cluster.from_env(env), client_factory=lambda e, *_: _client(api))
        is False
    )
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "init carries on" in warning.getMessage() and "malformed answer" in warning.getMessage()


# -- redirects ------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["redirect_bomb", "redirect_truncated"])
def test_a_redirect_is_refused_with_its_body_unread(api: Api, mode: str) -> None:
    """requests followed the 302 and decompressed its body whole on the way (1 GiB here: init's Node
    report reached 533 MB), or ended in a RuntimeError for a truncated one. An API server never
    redirects these calls: the 3xx is the error, naming its status and target, with nothing decompressed
    and no second request."""
    api.mode = mode
    grown_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, the process's peak so far
    started = time.monotonic()
    with _client(api, timeout=20) as client, pytest.raises(KubernetesError) as caught:
        client.get_node(NODE)
    took = time.monotonic() - started
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - grown_before) >> 10  # MiB
    assert took < 5, f"the refusal took {took:.1f} s"
    assert grown < 128, f"the peak memory grew by {grown} MiB"
    assert "302 Found" in caught.value.message and "'/bomb'" in caught.value.message, caught.value.message
    assert caught.value.fix is not None and "redirect" in caught.value.fix
    assert [path for _, path, _ in api.seen] == [f"/api/v1/nodes/{NODE}"], "the redirect was followed"


def test_the_node_report_survives_a_redirect(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    api.mode = "redirect_truncated"
    env = {"NODE_NAME": NODE, "KUBERNETES_SERVICE_HOST": "set"}
    assert (
        report(NodeVerdict(READY, "595.91.07"), Cluster.from_env(env), client_factory=lambda e, *_: _client(api))
        is False
    )
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "init carries on" in warning.getMessage() and "302 Found" in warning.getMessage()


# -- kubeconfig files that are FIFOs ----------------------------------------------------------------


def _call_within(seconds: float, call: Callable[[], object], unblock: Path) -> BaseException:
    """What ``call`` raised, run in a thread for at most ``seconds``; a call still blocked then (in the
    open of the FIFO ``unblock``) is released by opening the FIFO for writing, and the test fails."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the test
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        with contextlib.suppress(OSError):  # a writer's open and close: the blocked reader sees EOF
            os.close(os.open(unblock, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        pytest.fail(f"still blocked on the FIFO after {seconds:g} s")
    assert raised, "the call succeeded with a FIFO in the kubeconfig"
    return raised[0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("field", ["certificate-authority", "client-certificate", "client-key", "tokenFile"])
def test_a_kubeconfig_file_that_is_a_fifo_is_refused_at_once(
    api: Api, cert: tuple[Path, Path], tmp_path: Path, field: str
) -> None:
    """ssl opens the CA, certificate and key files by name: a FIFO there blocked the open for ever
    (init after Ready, driver-manager past every deadline). Every such file is read by the bounded
    reader, which refuses what is not a regular file."""
    api.mode = "node"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    user = {"client-certificate": str(cert[0]), "client-key": str(cert[1])}
    if field == "tokenFile":
        user = {"tokenFile": str(fifo)}
    elif field != "certificate-authority":
        user[field] = str(fifo)
    kubeconfig = _kubeconfig(tmp_path / "config", api, user)
    if field == "certificate-authority":
        doc = json.loads(kubeconfig.read_text())
        doc["clusters"][0]["cluster"][field] = str(fifo)
        kubeconfig.write_text(json.dumps(doc))

    def call() -> None:
        with KubeClient.for_cluster(
            Cluster.from_env({"KUBECONFIG": str(kubeconfig)}), KubeConfig(timeout=2, attempts=1)
        ) as client:
            client.get_node(NODE)

    started = time.monotonic()
    raised = _call_within(10, call, fifo)
    assert time.monotonic() - started < 3
    assert isinstance(raised, KubernetesError), repr(raised)
    assert f"{fifo}: " in raised.message and "not a regular file" in raised.message, raised.message
    assert api.seen == [], "a request went out without the configured credentials"


def test_an_in_cluster_ca_that_is_a_fifo_is_refused(api: Api, tmp_path: Path) -> None:
    """The service account's ca.crt as a FIFO was skipped (is_file) for the public trust bundle; it is
    read by the bounded reader like every credential file, so it is refused."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(TOKEN)
    os.mkfifo(account / "ca.crt")
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": api.url.rsplit(":", 1)[1]}
    config = KubeConfig(service_account_dir=account, timeout=2, attempts=1)
    with pytest.raises(KubernetesError, match="certificate-authority is not a regular file"):
        KubeClient.for_cluster(Cluster.from_env(env), config).get_node(NODE)
    assert api.seen == []


# -- credentials only over TLS ----------------------------------------------------------------------


@pytest.mark.parametrize("user", [{"token": TOKEN}, {"tokenFile": "token"}])
def test_no_token_is_sent_over_http(plain_api: Api, tmp_path: Path, user: dict[str, str]) -> None:
    plain_api.mode = "node"
    (tmp_path / "token").write_text(TOKEN)
    kubeconfig = _kubeconfig(tmp_path / "config", plain_api, user)
    config = KubeConfig(timeout=2, attempts=1)
    with (
        pytest.raises(KubernetesError, match="only over https://") as caught,
        KubeClient.for_cluster(Cluster.from_env({"KUBECONFIG": str(kubeconfig)}), config) as client,
    ):
        client.get_node(NODE)
    assert plain_api.seen == [], "a request reached the plain-HTTP server"
    assert plain_api.url in caught.value.message and caught.value.fix is not None


def test_no_endpoint_with_a_credential_talks_plain_http(plain_api: Api) -> None:
    for endpoint in (Endpoint(plain_api.url, token=TOKEN), Endpoint(plain_api.url, client_cert=("c", "k"))):
        with pytest.raises(KubernetesError, match="only over https://"):
            KubeClient(endpoint, KubeConfig(timeout=2, attempts=1))
    assert plain_api.seen == []


# -- through real processes -------------------------------------------------------------------------


def _in_cluster(h: Host, api: Api, tmp_path: Path) -> dict[str, str]:
    kubeconfig = _kubeconfig(tmp_path / "kubeconfig", api, {"token": TOKEN})
    return {"NODE_NAME": NODE, "KUBECONFIG": str(kubeconfig), "OPERATOR_NAMESPACE": "gpu-operator"}


def _sigterm_once_arrived(proc: subprocess.Popen[str], api: Api, what: str, *, settle: float) -> tuple[float, str]:
    """SIGTERM ``proc`` once its request reached ``api`` (and ``settle`` s more, inside the dribbled answer):
    the seconds until it ended, and its stderr. The process never outlives the test."""
    try:
        assert api.arrived.wait(90), what
        time.sleep(settle)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
        return time.monotonic() - sent, stderr
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.timeout(120)
def test_sigterm_during_a_dribbled_node_report_of_init_no_wait(api: Api, tmp_path: Path) -> None:
    """After Ready, `init --no-wait` annotates the Node in the main process; a server dribbling the answer
    held SIGTERM (a flag only) until the whole answer came: 30 s here."""
    h = make_host(tmp_path / "h")
    api.mode = "drip"
    proc = h.start("init", "--no-wait", **_in_cluster(h, api, tmp_path))
    took, stderr = _sigterm_once_arrived(proc, api, "init never reported to the API server", settle=0.1)
    assert took < 2.0, f"SIGTERM answered after {took:.1f} s"
    assert "SIGTERM received" in stderr and "stopped by a termination signal" in stderr, stderr
    assert "Traceback" not in stderr and TOKEN not in stderr
    assert (api.seen[0][0], api.seen[0][1]) == ("PATCH", f"/api/v1/nodes/{NODE}")


@pytest.mark.timeout(120)
def test_a_waiting_init_checks_its_root_after_a_malformed_node_answer(api: Api, tmp_path: Path) -> None:
    """The Node report and the check of DRIVER_ROOT share the child after Ready: a RecursionError in the
    first skipped the second (and logged a traceback)."""
    h = make_host(tmp_path / "h")
    api.mode = "deep"
    proc = h.start("init", **_in_cluster(h, api, tmp_path))
    try:
        wait_until((h.run_dir / "nvidia-driver.verify.json").exists, "the check after Ready", 60)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert api.seen, "init never reported to the API server"
    assert "Traceback" not in stderr and "malformed answer" in stderr, stderr
    assert json.loads((h.run_dir / "nvidia-driver.verify.json").read_text())["total_mismatches"] == 0


@pytest.mark.timeout(120)
def test_sigterm_to_driver_manager_during_a_dribbled_request(api: Api, tmp_path: Path) -> None:
    """driver-manager keeps the default SIGTERM action: it ends at once, whatever the request does."""
    import sys

    h = make_host(tmp_path / "h")
    api.mode = "drip"
    code = "import sys; from driver_container.cli.manager_cmd import main; main(sys.argv[1:])"
    env = {**h.env, **_in_cluster(h, api, tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "uninstall_driver"],
        env=env,
        cwd=h.base,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    took, stderr = _sigterm_once_arrived(proc, api, "driver-manager never called the API server", settle=0.3)
    assert took < 2.0
    assert proc.returncode == -signal.SIGTERM and "Traceback" not in stderr, stderr
