"""nvidia-persistenced: started by init when the host does not already run one, stopped on shutdown.

Facts (NVIDIA/nvidia-persistenced): the socket and pid file live in the fixed directory
``/var/run/nvidia-persistenced`` (NVPD_VAR_RUNTIME_DATA_PATH, no option changes it), and the daemon
detaches unless ``--foreground`` is given. We run it in the foreground so that we are its parent and see
its death at once (the kubelet must restart the pod then), and we make that fixed directory a symlink to
DRIVER_ROOT/run/nvidia-persistenced, so the socket appears where the container toolkit looks for it
(``<driver root>/run/nvidia-persistenced/socket``) without a bind mount.

A host daemon (Talos: the ``ext-nvidia-persistenced`` extension service, whose wrapper writes
``/var/run/nvidia-persistenced/nvidia-persistenced.pid``; siderolabs/extensions
nvidia-gpu/nvidia-container-toolkit/nvidia-persistenced-wrapper/main.go, ec9d5f68fcfb5d2c109219620ef5625ca9f462d6)
is recognised without trusting pid numbers: with Talos 1.14's ``workloadIsolation`` (default for new
clusters; talos pkg/machinery/config/types/runtime/security_profile_config.go, v1.14.0-rc.1) pods run in
sandboxd's PID namespace, so a hostPID pod sees neither machined nor extension services, and the host's
pid number may name an unrelated process there. A pid counts only when ``/proc/<pid>/comm`` is the daemon;
otherwise its socket under HOST_ROOT_MOUNT answering a connect() proves a live host daemon.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from driver_container.base.errors import CommandError, HostReadError, PublishError
from driver_container.base.resolver import Root
from driver_container.formats.numbers import parse_uint
from driver_container.runtime.fsutil import ensure_dir
from driver_container.runtime.runner import Runner

if TYPE_CHECKING:
    from driver_container.settings import DaemonChoice

log = logging.getLogger(__name__)

BINARY = "nvidia-persistenced"
# --persistence-mode as NVIDIA's script; --foreground so that we supervise it (see module doc).
ARGV = (BINARY, "--persistence-mode", "--foreground")
# The daemon's fixed runtime directory inside this container (not a host path).
CONTAINER_RUNTIME_DIR = Path("/var/run/nvidia-persistenced")
HOST_PID_FILE = "run/nvidia-persistenced/nvidia-persistenced.pid"  # under HOST_ROOT_MOUNT (Talos ext service)
HOST_SOCKET = "run/nvidia-persistenced/socket"
COMM = BINARY[:15]  # /proc/<pid>/comm holds at most TASK_COMM_LEN - 1 = 15 bytes
SOCKET_CONNECT_S = 0.5
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


def host_daemon_pid(host: Root, proc: Root) -> int | None:
    """The pid (host namespace) of a persistenced the host already runs, else None. See the module doc."""
    text = host.read_text_or_none(HOST_PID_FILE, limit=64)
    pid = parse_uint(text.strip()) if text is not None else None
    if pid is None:
        return None
    comm = _comm(proc, pid)
    if comm == COMM:
        return pid
    if _socket_answers(host):
        log.info(
            "%s names pid %d, not visible as %s in this pid namespace (Talos workloadIsolation?), but %s "
            "answers: the host runs %s",
            host.path / HOST_PID_FILE,
            pid,
            BINARY,
            host.path / HOST_SOCKET,
            BINARY,
        )
        return pid
    what = "not running" if comm is None else f"{comm!r} here, not {BINARY}"
    log.info(
        "%s names pid %d (%s) and %s does not answer: ignored",
        host.path / HOST_PID_FILE,
        pid,
        what,
        host.path / HOST_SOCKET,
    )
    return None


def _comm(proc: Root, pid: int) -> str | None:
    try:
        text = proc.read_text_or_none(f"{pid}/comm", limit=64)
    except HostReadError:
        return None
    return None if text is None else text.strip("\n")


def _socket_answers(host: Root) -> bool:
    """A unix socket at HOST_SOCKET that accepts a connection (a stale socket file refuses it)."""
    try:
        real = host.resolve(HOST_SOCKET)
        if not stat.S_ISSOCK(os.lstat(real).st_mode):
            return False
        # sun_path holds 108 bytes (unix(7)); a deep HOST_ROOT_MOUNT is reached through the directory's fd instead.
        parent = os.open(real.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.settimeout(SOCKET_CONNECT_S)
                client.connect(f"/proc/self/fd/{parent}/{real.name}")
        finally:
            os.close(parent)
    except (OSError, HostReadError):
        return False
    return True


def should_start(host: Root, proc: Root, mode: DaemonChoice, runner: Runner) -> bool:
    """NVIDIA_PERSISTENCED: false = never; true = required; auto = when the image has it and the host (its root
    ``host``, its processes in ``proc``) has none."""
    if mode == "false":
        log.info("NVIDIA_PERSISTENCED=false: not starting %s", BINARY)
        return False
    host_pid = host_daemon_pid(host, proc)
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
    # Made below DRIVER_ROOT through O_NOFOLLOW descriptors (fsutil.ensure_dir): a link swapped in is refused.
    published = ensure_dir(driver_root, PurePosixPath("run/nvidia-persistenced"))
    try:
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
            path=runtime_dir,
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
