"""A loopback Kubernetes API stand-in over TLS, for the client, driver-manager and the node report.

It implements the endpoints this project calls (GET/PATCH node with JSON merge patch, list pods by node and
label selector, GET of any object stored in ``ApiState.objects`` by its API path, eviction, POST events),
records every request, and can be told to answer with scripted statuses, to stall, or to refuse a (method,
path) with 403 (RBAC). ``ApiState.identities`` maps other bearer tokens to a user name and ``authorize``
decides per user (a stand-in for RBAC with several service accounts).
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from driver_container.kube.endpoint import Endpoint
from helpers.tls import self_signed

TOKEN = "s3cr3t-token-value"
NODE = "worker-gpu-1"
NS = "gpu-operator"


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class ApiState:
    labels: dict[str, str] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)  # (status, headers) answered first
    stall: float = 0.0  # seconds to sleep before answering
    daemonset_controller: bool = False  # pods vanish once their operand label is no longer "true"
    annotations: dict[str, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)  # POSTed core/v1 Events, as received
    forbidden: set[tuple[str, str]] = field(default_factory=set)  # (method, path) answered 403 (RBAC)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # API path -> object answered to GET
    evicted: list[str] = field(default_factory=list)  # names of pods evicted (from ``pods`` or ``objects``)
    identities: dict[str, str] = field(default_factory=dict)  # other bearer tokens -> user name
    authorize: Callable[[str, str, str], bool] | None = None  # (user, method, path) -> allowed; None: all
    users: list[str] = field(default_factory=list)  # the user of each request, in order
    requests: list[Recorded] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _selector_matches(selector: str, labels: dict[str, str]) -> bool:
    if not selector:
        return True
    if " in (" in selector:
        key, values = selector.split(" in (", 1)
        return labels.get(key.strip()) in values.rstrip(")").split(",")
    return all(labels.get(k) == v for k, v in (term.split("=", 1) for term in selector.split(",")))


class Handler(BaseHTTPRequestHandler):
    state: ApiState

    def log_message(self, *args: object) -> None:  # keep pytest output clean
        pass

    def _answer(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        st = self.state
        with st.lock:
            st.requests.append(
                Recorded(
                    self.command, url.path, parse_qs(url.query), dict(self.headers), json.loads(raw) if raw else None
                )
            )
            scripted = st.script.pop(0) if st.script else None
        if st.stall:
            time.sleep(st.stall)
        if scripted is not None:
            status, headers = scripted
            self._answer(status, {"kind": "Status", "message": f"scripted {status}"}, headers)
            return
        user = self._user()
        if user is None:
            self._answer(401, {"kind": "Status", "message": "Unauthorized"})
            return
        with st.lock:
            st.users.append(user)
        denied = st.authorize is not None and not st.authorize(user, self.command, url.path)
        if (self.command, url.path) in st.forbidden or denied:
            self._answer(403, {"kind": "Status", "message": f"cannot {self.command} {url.path}"})
            return
        if self.command == "GET" and url.path in st.objects:
            self._answer(200, st.objects[url.path])
            return
        self._route(url.path, parse_qs(url.query), json.loads(raw) if raw else None)

    def _user(self) -> str | None:
        """The caller: ``TOKEN`` (or no token) is the default user "admin", ``identities`` the others."""
        header = self.headers.get("Authorization")
        if header in (f"Bearer {TOKEN}", None):
            return "admin"
        return self.state.identities.get(str(header).removeprefix("Bearer "))

    def _route(self, path: str, query: dict[str, list[str]], body: Any) -> None:
        st = self.state
        if path == f"/api/v1/nodes/{NODE}":
            if self.command == "PATCH":
                assert self.headers["Content-Type"] == "application/merge-patch+json"
                for store, key in ((st.labels, "labels"), (st.annotations, "annotations")):
                    for name, value in body["metadata"].get(key, {}).items():
                        if value is None:
                            store.pop(name, None)
                        else:
                            store[name] = value
            meta = {"name": NODE, "labels": st.labels, "annotations": st.annotations}
            self._answer(200, {"kind": "Node", "metadata": meta})
        elif path == f"/api/v1/namespaces/{NS}/events" and self.command == "POST":
            st.events.append(body)
            self._answer(201, {**body, "metadata": {**body["metadata"], "name": f"ev-{len(st.events)}"}})
        elif path in (f"/api/v1/namespaces/{NS}/pods", "/api/v1/pods") and self.command == "GET":
            node = query["fieldSelector"][0].removeprefix("spec.nodeName=")
            if st.daemonset_controller:
                st.pods = [p for p in st.pods if st.labels.get(p["operand"]) == "true"]
            items = [
                {"metadata": {"name": p["name"], "labels": p["labels"]}}
                for p in st.pods
                if p["node"] == node and _selector_matches(query.get("labelSelector", [""])[0], p["labels"])
            ]
            self._answer(200, {"kind": "PodList", "items": items})
        elif path.endswith("/eviction") and self.command == "POST":
            name, pod_path = path.split("/")[-2], path.removesuffix("/eviction")
            if not any(p["name"] == name for p in st.pods) and pod_path not in st.objects:
                self._answer(404, {"kind": "Status", "message": "not found"})
                return
            st.pods = [p for p in st.pods if p["name"] != name]
            st.objects.pop(pod_path, None)
            st.evicted.append(name)
            self._answer(201, {"kind": "Status", "status": "Success"})
        else:
            self._answer(404, {"kind": "Status", "message": f"no route {self.command} {path}"})

    do_GET = do_PATCH = do_POST = _handle  # noqa: N815


@dataclass
class Server:
    url: str
    state: ApiState
    ca: Path | None = None


def start_server(
    state: ApiState, context: ssl.SSLContext | None = None
) -> tuple[ThreadingHTTPServer, threading.Thread]:
    handler = type("BoundHandler", (Handler,), {"state": state})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    httpd.handle_error = lambda request, address: None  # type: ignore[method-assign,assignment]  # clients that gave up
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    return httpd, thread


@pytest.fixture(scope="module")
def server_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("api-tls"), "server")


def start_tls(state: ApiState, cert: tuple[Path, Path]) -> tuple[ThreadingHTTPServer, Server]:
    """The API server over HTTPS (the client sends its token over TLS only), its CA being ``cert``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*cert)
    httpd, _ = start_server(state, context)
    return httpd, Server(f"https://127.0.0.1:{httpd.server_address[1]}", state, cert[0])


@pytest.fixture
def server(server_cert: tuple[Path, Path]) -> Iterator[Server]:
    httpd, srv = start_tls(ApiState(labels={"nvidia.com/gpu.deploy.driver": "true"}), server_cert)
    yield srv
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[Server, Path, Path]]:
    """HTTPS with a self-signed server cert; client certificates are requested and verified."""
    cert, key = self_signed(tmp_path, "server")
    client_cert, client_key = self_signed(tmp_path, "client")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(client_cert)
    context.verify_mode = ssl.CERT_OPTIONAL
    state = ApiState(labels={"a": "b"})
    httpd, _ = start_server(state, context)
    yield Server(f"https://127.0.0.1:{httpd.server_address[1]}", state, cert), client_cert, client_key
    httpd.shutdown()
    httpd.server_close()


def endpoint(server: Server) -> Endpoint:
    return Endpoint(server.url, verify=str(server.ca), token=TOKEN)
