"""Bounded, non-blocking reads of a token, namespace, kubeconfig, CA bundle, client certificate or key
(never a FIFO or /dev/zero)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from driver_container.base.errors import KubernetesError
from driver_container.base.fileread import converted, open_following, read_up_to, refuse_irregular, refuse_larger

log = logging.getLogger(__name__)


SECRET_LIMIT = 1 << 20  # a kubeconfig with embedded certificates is a few KiB; tokens are ~1 KiB


def read_small_file(path: Path, what: str, *, limit: int = SECRET_LIMIT, fix: str | None = None) -> str:
    """``read_small_bytes`` as text (a token, namespace or kubeconfig)."""
    return read_small_bytes(path, what, limit=limit, fix=fix).decode("utf-8", errors="replace")


def read_small_bytes(path: Path, what: str, *, limit: int = SECRET_LIMIT, fix: str | None = None) -> bytes:
    """A credential or configuration file: opened non-blocking, a regular file, at most ``limit`` bytes.
    Links are followed on purpose: service-account files are links into ``..data`` (kubelet's atomic
    writer), and a kubeconfig is often a link; what matters is that a FIFO or /dev/zero cannot hang or
    exhaust the manager."""
    boundary = converted(path, error=KubernetesError, verb=f"cannot read {what}", fix=fix)
    with boundary:
        fd = open_following(path)
    refuse_irregular(fd, path, error=KubernetesError, what=what, fix=fix)
    try:
        with boundary:
            data = read_up_to(fd, limit + 1)
    finally:
        os.close(fd)
    return refuse_larger(data, limit, path, error=KubernetesError, what=what, fix=fix)
