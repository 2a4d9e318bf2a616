"""A function run in a forked child with a deadline: killed (SIGKILL) when it runs past it.

For steps that read what they do not control and cannot interrupt themselves: hashing every file of
DRIVER_ROOT, inspecting the host for ``status``. A thread could not be stopped; a child is killed and
reaped, so ``bug-report`` keeps its time bound whatever a slow or hostile file does. The child is
``forkchild.fork_child``'s (dies with its parent, result through a pipe as ``childresult`` encodes it); at
the deadline it is killed with its process group: what it started goes too.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from driver_container.runtime.childresult import decode_result
from driver_container.runtime.forkchild import await_group_exit, fork_child, kill_group

if TYPE_CHECKING:
    from driver_container.runtime.signalcleanup import SignalCleanup

OK, ERROR, TIMED_OUT, DIED = "ok", "error", "timed out", "died"


def run_until(func: Callable[[], object], timeout: float, cleanup: SignalCleanup | None = None) -> tuple[str, Any]:
    """``(OK, value)``, ``(ERROR, the DriverContainerError)``, ``(TIMED_OUT, None)`` after the kill, or
    ``(DIED, None)`` when the child ended without a result. With ``cleanup`` a termination signal kills
    the child's group (the child itself dies with its parent, but not what it started)."""
    with cleanup.held() if cleanup is not None else contextlib.nullcontext():
        pid, read_fd = fork_child(func)
        key = cleanup.kill_group_on_signal(pid, f"killed the collecting process group {pid}") if cleanup else 0
    data: bytes | None = None
    try:
        data = _read_until(read_fd, time.monotonic() + max(timeout, 0.0))
    finally:
        os.close(read_fd)
        if data is None:
            kill_group(pid)
        os.waitpid(pid, 0)
        if data is None:
            await_group_exit(pid)
        if cleanup is not None:
            cleanup.discard(key)
    if data is None:
        return TIMED_OUT, None
    kind, value = decode_result(data)
    return (kind, value) if kind in (OK, ERROR) else (DIED, None)


def _read_until(fd: int, deadline: float) -> bytes | None:
    """Everything written to ``fd`` until EOF; None when ``deadline`` passes first."""
    chunks: list[bytes] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
