"""The pid file is ours alone (mode 600, our uid, one name), and a lock another program holds on it never
wedges a restart: the holder is named from /proc/locks and /proc/PID/cmdline (a fixture procfs here, the
real one in one test), this program holding it is refused, any other program's lock is left behind on the
old file."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver_container.base.errors import LockError
from driver_container.base.resolver import Root
from driver_container.formats.kernel.locks import parse_locks
from driver_container.runtime.lock import PidLock

HOLD = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\n"
    "time.sleep(60)\n"
)


@contextlib.contextmanager
def held_by_child(path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process that is not nvidia-driver holding an exclusive flock on ``path`` (ended with the test)."""
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        yield child
    finally:
        child.kill()
        child.wait(timeout=10)


def fake_proc(root: Path, path: Path, pid: int, cmdline: bytes | None) -> Root:
    """A procfs whose /proc/locks says ``pid`` holds an flock on ``path``, with its command line."""
    st = os.stat(path)
    line = f"1: FLOCK  ADVISORY  WRITE {pid} {os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino} 0 EOF\n"
    (root / str(pid)).mkdir(parents=True)
    (root / "locks").write_text("1: POSIX  ADVISORY  WRITE 1 00:01:2 0 EOF\n" + line)
    if cmdline is not None:
        (root / str(pid) / "cmdline").write_bytes(cmdline)
    return Root(root)


def leftover(run: Path) -> Path:
    """A pid file a SIGKILLed init left: ours (mode 600), naming a dead pid."""
    run.mkdir(parents=True, exist_ok=True)
    pid_file = run / "nvidia-driver.pid"
    pid_file.write_text("999999\n")
    pid_file.chmod(0o600)
    return pid_file


def test_the_pid_file_is_ours_alone(tmp_path: Path) -> None:
    pid_file = tmp_path / "run/nvidia-driver.pid"
    with PidLock(pid_file):
        st = os.lstat(pid_file)
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o660])
def test_a_pid_file_others_may_open_is_replaced(tmp_path: Path, mode: int, caplog: pytest.LogCaptureFixture) -> None:
    """An older version's 0644 file: another uid may hold a descriptor of it and lock it later."""
    pid_file = tmp_path / "nvidia-driver.pid"
    pid_file.write_text("999999\n")
    pid_file.chmod(mode)
    old = os.stat(pid_file).st_ino
    keep = os.open(pid_file, os.O_RDONLY)  # someone's descriptor of the old file keeps its inode alive
    try:
        with PidLock(pid_file):
            st = os.lstat(pid_file)
            assert st.st_ino != old and stat.S_IMODE(st.st_mode) == 0o600
            assert pid_file.read_text() == f"{os.getpid()}\n"
    finally:
        os.close(keep)
    assert f"has mode {mode:o}: replaced" in caplog.text


def test_a_pid_file_with_a_second_name_is_replaced(tmp_path: Path) -> None:
    pid_file = leftover(tmp_path)
    os.link(pid_file, tmp_path / "elsewhere")
    with PidLock(pid_file):
        assert os.lstat(pid_file).st_nlink == 1
    assert (tmp_path / "elsewhere").read_text() == "999999\n"


def test_another_programs_lock_does_not_block_and_is_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A process that is not nvidia-driver holding the lock refused every restart ("already running")."""
    pid_file = leftover(tmp_path / "run")
    with held_by_child(pid_file) as child:
        proc = fake_proc(tmp_path / "proc", pid_file, child.pid, b"sleep\x00100000\x00")
        with caplog.at_level(logging.WARNING), PidLock(pid_file, proc) as lock:
            assert lock.held and pid_file.read_text() == f"{os.getpid()}\n"
        assert child.poll() is None, "the other program was not touched"
    assert f"is locked by pid {child.pid} (sleep 100000), which is not nvidia-driver" in caplog.text


@pytest.mark.parametrize(
    "cmdline",
    [
        b"/opt/nvidia-driver/bin/python\x00/opt/nvidia-driver/bin/nvidia-driver\x00init\x00",
        b"nvidia-driver\x00init\x00",
        b"/usr/bin/python3\x00-m\x00driver_container\x00init\x00",
    ],
)
def test_this_program_holding_it_is_refused_by_name(tmp_path: Path, cmdline: bytes) -> None:
    pid_file = leftover(tmp_path / "run")
    with held_by_child(pid_file):
        proc = fake_proc(tmp_path / "proc", pid_file, 4242, cmdline)
        with pytest.raises(LockError) as caught:
            PidLock(pid_file, proc).acquire()
    shown = cmdline.rstrip(b"\0").replace(b"\0", b" ").decode()
    assert caught.value.message == f"already running (pid 4242): {pid_file} is locked by pid 4242 ({shown})"
    assert caught.value.holder == 4242 and pid_file.read_text() == "999999\n"


def test_a_holder_that_cannot_be_identified_is_refused(tmp_path: Path) -> None:
    """No /proc/locks line for the file (or no cmdline): it may be this program; refused as before."""
    pid_file = leftover(tmp_path / "run")
    with held_by_child(pid_file):
        (tmp_path / "empty-proc").mkdir()
        with pytest.raises(LockError, match=r"already running \(pid 999999\): .* /proc/locks does not name"):
            PidLock(pid_file, Root(tmp_path / "empty-proc")).acquire()
        proc = fake_proc(tmp_path / "proc", pid_file, 4242, None)
        with pytest.raises(LockError, match=r"by pid 4242, which cannot be identified"):
            PidLock(pid_file, proc).acquire()


def test_the_real_proc_locks_names_the_holder(tmp_path: Path) -> None:
    """The parser on the running kernel's own /proc/locks (read only): the child's flock is there."""
    pid_file = leftover(tmp_path)
    st = os.stat(pid_file)
    with held_by_child(pid_file) as child:
        locks = parse_locks(Path("/proc/locks").read_text())
    assert [lock.pid for lock in locks if lock.inode == st.st_ino and lock.kind == "FLOCK"] == [child.pid]


@pytest.mark.root
def test_another_uid_cannot_open_the_pid_file(tmp_path: Path) -> None:
    """nobody (65534) opened the world-readable pid file and held its lock: every restart refused."""
    if os.geteuid() != 0:
        pytest.skip("needs root (setuid)")
    run = tmp_path / "run"
    with PidLock(run / "nvidia-driver.pid"):
        directory = os.open(run, os.O_PATH | os.O_DIRECTORY)  # so the child needs no access to tmp_path
        try:
            child = os.fork()
            if child == 0:  # pragma: no cover - the child reports through its exit status only
                status = 2
                try:
                    os.setgroups([])
                    os.setgid(65534)
                    os.setuid(65534)
                    os.close(os.open("nvidia-driver.pid", os.O_RDONLY | os.O_NONBLOCK, dir_fd=directory))
                    status = 1
                except PermissionError:
                    status = 0
                finally:
                    os._exit(status)
            _, wait_status = os.waitpid(child, 0)
        finally:
            os.close(directory)
    assert os.waitstatus_to_exitcode(wait_status) == 0, "uid 65534 opened the pid file"
