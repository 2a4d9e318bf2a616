"""nvidia-persistenced: started by init when the host does not already run one, stopped on shutdown.

Facts (NVIDIA/nvidia-persistenced): the socket and pid file live in the fixed directory
``/var/run/nvidia-persistenced`` (NVPD_VAR_RUNTIME_DATA_PATH, no option changes it), and the daemon
detaches unless ``--foreground`` is given. We run it in the foreground so that we are its parent and see
its death at once (the kubelet must restart the pod then), and we make that fixed directory a symlink to
DRIVER_ROOT/run/nvidia-persistenced, so the socket appears where the container toolkit looks for it
(``<driver root>/run/nvidia-persistenced/socket``) without a bind mount.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from driver_container.errors import CommandError, PublishError
from driver_container.fsutil import contained
from driver_container.numbers import parse_uint
from driver_container.paths import HostPaths
from driver_container.runner import Runner

log = logging.getLogger(__name__)

BINARY = "nvidia-persistenced"
# --persistence-mode as NVIDIA's script; --foreground so that we supervise it (see module doc).
ARGV = (BINARY, "--persistence-mode", "--foreground")
# The daemon's fixed runtime directory inside this container (not a host path).
CONTAINER_RUNTIME_DIR = Path("/var/run/nvidia-persistenced")
HOST_PID_FILE = "run/nvidia-persistenced/nvidia-persistenced.pid"  # under HOST_ROOT (Talos ext service)
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class Persistenced:
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def exited(self) -> int | None:
        """Exit status when it has died, else None (non-blocking)."""
        return self.process.poll()


def host_daemon_pid(paths: HostPaths) -> int | None:
    """The pid of a persistenced the host already runs (pid file under HOST_ROOT and a live /proc/<pid>)."""
    text = paths.host.read_text_or_none(HOST_PID_FILE, limit=64)
    pid = parse_uint(text.strip()) if text is not None else None
    if pid is None:
        return None
    # hostPID: true in the operator's DaemonSet, so PROCFS_ROOT shows the host's processes.
    if not paths.proc.is_dir(str(pid)):
        log.info("%s names pid %d which is not running: ignored", paths.host_root / HOST_PID_FILE, pid)
        return None
    return pid


def should_start(paths: HostPaths, mode: str, runner: Runner) -> bool:
    """NVIDIA_PERSISTENCED: false = never; true = required; auto = when the image has it and the host has none."""
    if mode == "false":
        log.info("NVIDIA_PERSISTENCED=false: not starting %s", BINARY)
        return False
    host_pid = host_daemon_pid(paths)
    if host_pid is not None:
        log.info("the host already runs %s (pid %d): not starting another", BINARY, host_pid)
        return False
    try:
        runner.which(BINARY)
    except CommandError:
        if mode == "true":
            raise
        log.info("%s not in this image (PATH): persistence mode is left to the driver default", BINARY)
        return False
    return True


def link_runtime_dir(driver_root: Path, runtime_dir: Path = CONTAINER_RUNTIME_DIR) -> Path:
    """Point the daemon's fixed runtime dir at DRIVER_ROOT/run/nvidia-persistenced; returns the socket path."""
    published = contained(driver_root, driver_root / "run/nvidia-persistenced")
    try:
        published.mkdir(parents=True, exist_ok=True)
        if runtime_dir.is_symlink():
            if Path(os.readlink(runtime_dir)) == published:
                return published / "socket"
            runtime_dir.unlink()
        elif runtime_dir.is_dir():
            # A directory baked into the image or left by an earlier start: only stale files can be in it.
            for entry in runtime_dir.iterdir():
                entry.unlink()
            runtime_dir.rmdir()
        runtime_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = runtime_dir.with_name(f".{runtime_dir.name}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(published)
        os.replace(tmp, runtime_dir)
    except OSError as exc:
        raise PublishError(
            f"{runtime_dir}: cannot link to {published}: {exc.strerror}",
            fix="the daemon's socket must appear under DRIVER_ROOT/run/nvidia-persistenced",
        ) from exc
    return published / "socket"


def start(runner: Runner) -> Persistenced:
    process = runner.spawn(ARGV)
    log.info("%s started (pid %d)", BINARY, process.pid)
    return Persistenced(process)


def stop(daemon: Persistenced, grace_s: float = STOP_GRACE_S) -> int | None:
    """SIGTERM, wait at most ``grace_s``, then SIGKILL (NVIDIA's script polls 5 s the same way)."""
    if daemon.exited() is not None:
        return daemon.exited()
    with contextlib.suppress(ProcessLookupError):
        daemon.process.send_signal(signal.SIGTERM)
    try:
        code = daemon.process.wait(timeout=grace_s)
        log.info("%s stopped (exit %s)", BINARY, code)
        return code
    except subprocess.TimeoutExpired:
        log.warning("%s ignored SIGTERM for %.0f s: killing it", BINARY, grace_s)
        with contextlib.suppress(ProcessLookupError):
            daemon.process.kill()
        return daemon.process.wait()
