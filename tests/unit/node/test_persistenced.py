from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.fakes import FAKE_PERSISTENCED
from helpers.waits import wait_until

from driver_container.base.errors import CommandError
from driver_container.base.paths import HostPaths
from driver_container.node import persistenced
from driver_container.runtime.runner import Runner

FAKE = FAKE_PERSISTENCED


def _runner(tmp_path: Path, mode: str = "normal", *, with_binary: bool = True) -> Runner:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    if with_binary:
        tool = bindir / "nvidia-persistenced"
        tool.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
        tool.chmod(0o755)
    return Runner(
        env={
            "PATH": str(bindir),
            "FAKE_LOG": str(tmp_path / "calls.log"),
            "FAKE_PERSISTENCED_DIR": str(tmp_path / "container/var/run/nvidia-persistenced"),
            "FAKE_PERSISTENCED_MODE": mode,
        }
    )


def test_mode_false_never_starts(node_host: Callable[[str], HostPaths], tmp_path: Path) -> None:
    paths = node_host("no-nvidia")
    assert not persistenced.should_start(paths.host, paths.proc, "false", _runner(tmp_path))


def test_auto_without_binary_skips_but_true_fails(node_host: Callable[[str], HostPaths], tmp_path: Path) -> None:
    paths = node_host("no-nvidia")
    runner = _runner(tmp_path, with_binary=False)
    assert not persistenced.should_start(paths.host, paths.proc, "auto", runner)
    with pytest.raises(CommandError, match="nvidia-persistenced: not found on PATH"):
        persistenced.should_start(paths.host, paths.proc, "true", runner)


def test_host_daemon_alive_blocks_stale_does_not(node_host: Callable[[str], HostPaths], tmp_path: Path) -> None:
    paths = node_host("no-nvidia")
    pid_file = paths.host_root / persistenced.HOST_PID_FILE
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text("4242\n")
    assert persistenced.should_start(paths.host, paths.proc, "auto", _runner(tmp_path))  # pid 4242 not in fixture /proc
    (paths.procfs_root / "4242").mkdir()
    (paths.procfs_root / "4242/comm").write_text("nvidia-persiste\n")  # the kernel's 15-byte comm
    assert persistenced.host_daemon_pid(paths.host, paths.proc) == 4242
    assert not persistenced.should_start(paths.host, paths.proc, "true", _runner(tmp_path))


def test_start_socket_visible_in_driver_root_then_stop(node_host: Callable[[str], HostPaths], tmp_path: Path) -> None:
    paths = node_host("no-nvidia")
    runtime = tmp_path / "container/var/run/nvidia-persistenced"
    runtime.mkdir(parents=True)
    (runtime / "stale.pid").write_text("1")  # an image-baked dir is replaced by the link
    socket = persistenced.link_runtime_dir(paths.driver_root, runtime)
    assert socket == paths.driver_root / "run/nvidia-persistenced/socket"
    assert os.readlink(runtime) == str(paths.driver_root / "run/nvidia-persistenced")
    assert persistenced.link_runtime_dir(paths.driver_root, runtime) == socket  # idempotent
    daemon = persistenced.start(_runner(tmp_path))
    wait_until(socket.exists, "the fake daemon's socket", timeout=10)
    assert (tmp_path / "calls.log").read_text() == "nvidia-persistenced --persistence-mode --foreground\n"
    assert daemon.exited() is None
    assert persistenced.stop(daemon) == 0
    assert not socket.exists()


def test_stop_kills_a_daemon_ignoring_sigterm(node_host: Callable[[str], HostPaths], tmp_path: Path) -> None:
    paths = node_host("no-nvidia")
    socket = persistenced.link_runtime_dir(paths.driver_root, tmp_path / "container/var/run/nvidia-persistenced")
    daemon = persistenced.start(_runner(tmp_path, "ignore-term"))
    wait_until(socket.exists, "the fake daemon's socket", timeout=10)
    started = time.monotonic()
    assert persistenced.stop(daemon, grace_s=0.5) == -9
    assert time.monotonic() - started < 3


def test_death_is_seen(node_host: Callable[[str], HostPaths], tmp_path: Path) -> None:
    paths = node_host("no-nvidia")
    persistenced.link_runtime_dir(paths.driver_root, tmp_path / "container/var/run/nvidia-persistenced")
    daemon = persistenced.start(_runner(tmp_path, "die"))
    wait_until(lambda: daemon.exited() is not None, "the fake daemon's exit", timeout=10)
    assert daemon.exited() == 3
    assert persistenced.stop(daemon) == 3  # stopping a dead daemon is harmless


def test_workload_isolation_pid_of_another_process_is_not_the_daemon(
    node_host: Callable[[str], HostPaths], tmp_path: Path
) -> None:
    # Talos 1.14 workloadIsolation: hostPID is sandboxd's PID namespace, so the host pid in the ext
    # service's pid file can name an unrelated sandbox process here. A stale pid file must not block start.
    paths = node_host("no-nvidia")
    pid_file = paths.host_root / persistenced.HOST_PID_FILE
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text("1\n")
    (paths.procfs_root / "1").mkdir()
    (paths.procfs_root / "1/comm").write_text("sandboxd\n")
    assert persistenced.host_daemon_pid(paths.host, paths.proc) is None
    assert persistenced.should_start(paths.host, paths.proc, "auto", _runner(tmp_path))


def test_workload_isolation_hidden_daemon_found_by_its_socket(
    node_host: Callable[[str], HostPaths], tmp_path: Path
) -> None:
    # ext-nvidia-persistenced runs outside the sandbox: its pid is invisible, its socket is not.
    import socket

    paths = node_host("no-nvidia")
    pid_file = paths.host_root / persistenced.HOST_PID_FILE
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text("4242\n")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock_path = paths.host_root / persistenced.HOST_SOCKET
    cwd = os.getcwd()
    try:
        os.chdir(sock_path.parent)  # bind by a short name: tmp_path can exceed sun_path's 108 bytes
        server.bind(sock_path.name)
        os.chdir(cwd)
        server.listen(1)
        assert persistenced.host_daemon_pid(paths.host, paths.proc) == 4242
        assert not persistenced.should_start(paths.host, paths.proc, "auto", _runner(tmp_path))
    finally:
        os.chdir(cwd)
        server.close()
    # A socket file nobody listens on (the daemon died) is stale.
    assert persistenced.host_daemon_pid(paths.host, paths.proc) is None
