"""Where the API server is and how to authenticate: the pod's service account, or a kubeconfig."""

from __future__ import annotations

import base64
import binascii
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver_container.base.errors import KubernetesError
from driver_container.kube.secretfile import read_small_file
from driver_container.settings import Cluster
from driver_container.settings.variables import DEFAULT_OPERATOR_NAMESPACE

log = logging.getLogger(__name__)


# Where the kubelet mounts the service-account token, CA bundle and namespace (Kubernetes docs,
# "Accessing the Kubernetes API from a Pod").
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class KubeConfig:
    """Every knob of the client in one place; tests pass their own paths and short timeouts."""

    service_account_dir: Path = SERVICE_ACCOUNT_DIR
    timeout: float = 10.0  # seconds, connect and read, per HTTP request
    attempts: int = 6  # tries per call for retryable failures
    backoff: float = 0.5  # first delay; doubles per retry
    backoff_max: float = 8.0


@dataclass(frozen=True)
class Endpoint:
    """Where the API server is and how to authenticate. ``verify`` is a CA bundle path or a bool."""

    server: str
    verify: str | bool = True
    token: str | None = field(default=None, repr=False)
    client_cert: tuple[str, str] | None = None
    description: str = ""


def in_cluster_endpoint(cluster: Cluster, config: KubeConfig) -> Endpoint:
    host, port = cluster.service_host or "", cluster.service_port
    sa = config.service_account_dir
    token = read_small_file(
        sa / "token",
        "the service-account token",
        fix="mount the service account (automountServiceAccountToken: true) or set KUBECONFIG",
    ).strip()
    ca = sa / "ca.crt"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6 service address
    return Endpoint(
        server=f"https://{host}:{port}",
        # Present in any form (a FIFO too): tlscontext.py reads it, or refuses it, through the bounded reader.
        verify=str(ca) if ca.exists() else True,
        token=token,
        description=f"in-cluster service account ({sa})",
    )


def namespace_of_service_account(config: KubeConfig) -> str | None:
    try:
        return read_small_file(config.service_account_dir / "namespace", "namespace").strip() or None
    except KubernetesError:
        return None


def operator_namespace(cluster: Cluster, config: KubeConfig | None = None) -> str:
    """The one rule for OPERATOR_NAMESPACE: as set, else this pod's service account's namespace (the pod's
    own, which is what gpu-operator sets it to), else the declared default (settings/variables.py)."""
    return (
        cluster.operator_namespace or namespace_of_service_account(config or KubeConfig()) or DEFAULT_OPERATOR_NAMESPACE
    )


def _materialise(data: str | None, name: str, workdir: Path, what: str) -> str:
    """Decode a kubeconfig ``*-data`` field into a private file (requests takes only file names)."""
    try:
        raw = base64.b64decode(data or "", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise KubernetesError(f"{what}: not valid base64", fix="check the kubeconfig") from exc
    target = workdir / name
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(raw)
    return str(target)


def kubeconfig_endpoint(path_list: str, workdir: Path, context: str | None = None) -> Endpoint:
    """The endpoint of KUBECONFIG's context; the first existing file of a ``:``-list is used."""
    # Lazy, hot path: the in-cluster path (init's node report, every driver-manager pod) never parses a
    # kubeconfig, nor imports its reader.
    from driver_container.kube.kubeconfig import load_kubeconfig_file, select_context

    candidates = [Path(p) for p in path_list.split(os.pathsep) if p]
    source = next((p for p in candidates if p.is_file()), None)
    if source is None:
        raise KubernetesError(f"KUBECONFIG={path_list}: no such file", fix="point KUBECONFIG at a kubeconfig file")
    entry = select_context(load_kubeconfig_file(source), source, context)
    where = f"{source} context {entry.context}"
    if entry.insecure:
        # Decision: every user driver-manager accepts carries a credential (token or
        # client key), and without verification anyone on the path receives it. kubectl allows the flag;
        # we refuse it rather than silently sending a cluster-admin token to an unverified peer.
        raise KubernetesError(
            f"{where}: the cluster sets insecure-skip-tls-verify; driver-manager never sends credentials "
            "over a TLS connection it has not verified",
            path=source,
            fix="remove insecure-skip-tls-verify and set certificate-authority(-data) to the API server's CA "
            "(talosctl kubeconfig writes it)",
        )
    verify: str | bool = True
    if entry.ca_data:
        verify = _materialise(entry.ca_data, "ca.crt", workdir, f"{where}: certificate-authority-data")
    elif entry.ca_file:
        verify = str(entry.ca_file)
    token = entry.token
    if token is None and entry.token_file is not None:
        token = read_small_file(entry.token_file, "tokenFile").strip()
    cert = _client_cert(entry, workdir, where)
    if token is None and cert is None:
        raise KubernetesError(
            f"{where}: the user has neither a token nor a client certificate",
            path=source,
            fix="check KUBECONFIG",
        )
    return Endpoint(server=entry.server, verify=verify, token=token, client_cert=cert, description=where)


def _client_cert(entry: Any, workdir: Path, where: str) -> tuple[str, str] | None:
    cert = str(entry.client_cert_file) if entry.client_cert_file else None
    key = str(entry.client_key_file) if entry.client_key_file else None
    if entry.client_cert_data:
        cert = _materialise(entry.client_cert_data, "client.crt", workdir, f"{where}: client-certificate-data")
    if entry.client_key_data:
        key = _materialise(entry.client_key_data, "client.key", workdir, f"{where}: client-key-data")
    if (cert is None) != (key is None):
        raise KubernetesError(
            f"{where}: a client certificate needs both certificate and key",
            fix="check KUBECONFIG",
        )
    return (cert, key) if cert and key else None
