"""Bounded, non-blocking reads of a token, namespace or kubeconfig (never a FIFO or /dev/zero)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from driver_container.errors import KubernetesError

log = logging.getLogger(__name__)


SECRET_LIMIT = 1 << 20  # a kubeconfig with embedded certificates is a few KiB; tokens are ~1 KiB


def read_small_file(path: Path, what: str, *, limit: int = SECRET_LIMIT, fix: str | None = None) -> str:
    """A token, namespace or kubeconfig: opened non-blocking, a regular file, at most ``limit`` bytes.
    Links are followed on purpose: service-account files are links into ``..data`` (kubelet's atomic
    writer), and a kubeconfig is often a link; what matters is that a FIFO or /dev/zero cannot hang or
    exhaust the manager."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise KubernetesError(f"{path}: cannot read {what}: {exc.strerror}", path=path, fix=fix) from exc
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise KubernetesError(f"{path}: {what} is not a regular file", path=path, fix=fix)
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise KubernetesError(f"{path}: cannot read {what}: {exc.strerror}", path=path, fix=fix) from exc
    if len(data) > limit:
        raise KubernetesError(f"{path}: {what} is larger than {limit} bytes", path=path, fix=fix)
    return data.decode("utf-8", errors="replace")
