"""A self-signed certificate for 127.0.0.1, an HTTPS test server and its JSON answers: the API stand-ins
speak TLS because the client sends a credential over TLS only (driver_container/kube/client.py)."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from helpers.support import require

RSA_KEY = ("-newkey", "rsa:2048")
EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")


def self_signed(directory: Path, name: str = "server", key_type: tuple[str, ...] = RSA_KEY) -> tuple[Path, Path]:
    """(certificate, key) of a one-day certificate for 127.0.0.1 (RSA unless ``key_type`` says otherwise),
    written into ``directory``."""
    require(shutil.which("openssl"), "openssl", how="apt-get install openssl")
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            *key_type,
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def serve_tls(httpd: ThreadingHTTPServer, cert: Path, key: Path) -> ThreadingHTTPServer:
    """``httpd`` answering over TLS with ``cert``; daemon threads, so a hung handler never holds the test."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.daemon_threads = True
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    return httpd


def answer_json(handler: BaseHTTPRequestHandler, status: int, body: object) -> None:
    """Answer the request ``handler`` serves with ``body`` as JSON and its length."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
