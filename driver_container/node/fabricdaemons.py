"""The fabric daemons ``init`` started (Fabric Manager, NVLSM): their records, liveness, log tails and stop.

node/fabricmanager.py decides what to start and starts it; this module holds what a running daemon is.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from driver_container.base.errors import FabricError
from driver_container.base.fileread import open_nofollow, read_up_to, regular_stat
from driver_container.readers.fabric import FabricInfo

log = logging.getLogger(__name__)

STOP_GRACE_S = 5.0  # NVIDIA's _unload_driver polls 50 x 0.1 s
TAIL_LINES = 20
TAIL_BYTES = 16 * 1024


@dataclass
class Daemon:
    name: str
    process: subprocess.Popen[bytes]
    pid_file: Path
    logs: tuple[Path, ...]

    def exited(self) -> int | None:
        return self.process.poll()


@dataclass
class FabricDaemons:
    info: FabricInfo
    started: list[Daemon] = field(default_factory=list)

    def check_alive(self) -> None:
        for daemon in self.started:
            code = daemon.exited()
            if code is not None:
                raise FabricError(
                    f"{daemon.name} (pid {daemon.process.pid}) exited with status {code}{log_tail(daemon.logs)}",
                    daemon=daemon.name,
                    pid=daemon.process.pid,
                    returncode=code,
                    fix=daemons_fix(self.info),
                )


def daemons_fix(info: FabricInfo) -> str:
    """The remedy shown when a fabric daemon dies or the fabric does not train."""
    base = "see the log above; the pod restarts and init starts it again"
    if info.kind == "nvlink5":
        return base + "; on NVLink5 systems mlx5_core, mlx5_ib and ib_umad must be loaded (docs/fabric.md)"
    return base + "; nv-fabricmanager must be the loaded driver's version (docs/fabric.md)"


def log_tail(files: tuple[Path, ...], lines: int = TAIL_LINES) -> str:
    """The last lines of each readable log file, for an error message ("" when there are none)."""
    parts = []
    for path in files:
        try:
            fd = open_nofollow(path)
        except OSError:
            continue
        try:
            st = regular_stat(fd)
            if st is None:
                continue
            os.lseek(fd, max(0, st.st_size - TAIL_BYTES), os.SEEK_SET)
            text = read_up_to(fd, TAIL_BYTES).decode("utf-8", errors="replace").splitlines()[-lines:]
        finally:
            os.close(fd)
        if text:
            parts.append(f"\n--- last lines of {path} ---\n" + "\n".join(text))
    return "".join(parts)


def tails(daemons: FabricDaemons) -> str:
    """The last lines of every started daemon's logs, for an error message."""
    return "".join(log_tail(d.logs) for d in daemons.started)


def stop_all(daemons: FabricDaemons, grace_s: float = STOP_GRACE_S) -> None:
    """FM first, then NVLSM (reverse start order): SIGTERM, ``grace_s``, SIGKILL; remove our pid files."""
    for daemon in reversed(daemons.started):
        _stop(daemon, grace_s)
        with contextlib.suppress(OSError):
            daemon.pid_file.unlink()
    daemons.started.clear()


def _stop(daemon: Daemon, grace_s: float) -> None:
    if daemon.exited() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        daemon.process.send_signal(signal.SIGTERM)
    try:
        log.info("%s stopped (exit %s)", daemon.name, daemon.process.wait(timeout=grace_s))
    except subprocess.TimeoutExpired:
        log.warning("%s ignored SIGTERM for %.0f s: killing it", daemon.name, grace_s)
        with contextlib.suppress(ProcessLookupError):
            daemon.process.kill()
        daemon.process.wait()
