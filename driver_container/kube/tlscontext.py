"""The client's TLS context, built from bytes read by the bounded reader: ssl never opens a file by name.

``ssl`` (and so requests and urllib3) take the CA bundle, client certificate and key as file names and
open them with OpenSSL's blocking ``fopen``: a kubeconfig naming a FIFO there held the open for ever, out
of reach of any deadline. Here each file is read by ``secretfile.read_small_bytes`` (non-blocking, a
regular file, bounded) and the CA goes to ``load_verify_locations(cadata=...)``. The client certificate
and key have no in-memory loader in ``ssl``: they are written to files of a directory this process creates
(mode 0700, files 0600, ``O_EXCL|O_NOFOLLOW``), loaded, and removed at once.
"""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
from pathlib import Path

from requests.utils import DEFAULT_CA_BUNDLE_PATH

from driver_container.base.errors import KubernetesError
from driver_container.kube.endpoint import Endpoint
from driver_container.kube.secretfile import read_small_bytes

# requests' own default trust (certifi's bundle, requests/utils.py DEFAULT_CA_BUNDLE_PATH), ~230 KiB.
CA_BUNDLE_LIMIT = 4 << 20
_FIX = "point certificate-authority at the API server's CA (a PEM file), or use certificate-authority-data"


def tls_context(endpoint: Endpoint) -> ssl.SSLContext:
    """Verification as ``endpoint.verify`` says (a CA file, or requests' default bundle), and its client
    certificate; ``KubernetesError`` naming the file for anything unreadable or not PEM."""
    if endpoint.verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = _verifying(_ca_file(endpoint.verify))
    if endpoint.client_cert is not None:
        _load_client_certificate(context, *endpoint.client_cert)
    return context


def _ca_file(verify: str | bool) -> Path:
    if isinstance(verify, str):
        return Path(verify)
    return Path(DEFAULT_CA_BUNDLE_PATH)


def _verifying(ca_file: Path) -> ssl.SSLContext:
    pem = read_small_bytes(ca_file, "certificate-authority", limit=CA_BUNDLE_LIMIT, fix=_FIX)
    try:
        # Only this CA: create_default_context loads the system's trust only when given none.
        return ssl.create_default_context(cadata=pem.decode("ascii"))
    except (ssl.SSLError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise KubernetesError(
            f"{ca_file}: certificate-authority is not a PEM certificate ({type(exc).__name__})",
            path=ca_file,
            fix=_FIX,
        ) from exc


def _load_client_certificate(context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
    cert = read_small_bytes(Path(cert_file), "client-certificate", fix="check KUBECONFIG")
    key = read_small_bytes(Path(key_file), "client-key", fix="check KUBECONFIG")
    private = tempfile.mkdtemp(prefix="driver-manager-tls-")  # mode 0700, a new name: nothing there but ours
    try:
        context.load_cert_chain(_private_file(private, "client.crt", cert), _private_file(private, "client.key", key))
    except (ssl.SSLError, ValueError) as exc:
        raise KubernetesError(
            f"{cert_file}, {key_file}: not a matching PEM client certificate and key ({type(exc).__name__})",
            path=cert_file,
            fix="check KUBECONFIG",
        ) from exc
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _private_file(directory: str, name: str, data: bytes) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path
