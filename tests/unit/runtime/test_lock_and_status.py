from __future__ import annotations

import os
from pathlib import Path

import pytest

from driver_container.base.errors import LockError
from driver_container.base.paths import HostPaths
from driver_container.runtime import statusfiles
from driver_container.runtime.lock import PidLock


def test_lock_writes_our_pid_and_release_removes_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "run/nvidia-driver.pid"
    with PidLock(pid_file) as lock:
        assert lock.held
        assert pid_file.read_text() == f"{os.getpid()}\n"
    assert not pid_file.exists()


def test_second_holder_is_refused_naming_the_first(tmp_path: Path) -> None:
    pid_file = tmp_path / "nvidia-driver.pid"
    first = PidLock(pid_file)
    first.acquire()
    try:
        # flock belongs to the open file description: a second open in this process conflicts too.
        with pytest.raises(LockError, match=rf"already running \(pid {os.getpid()}\)"):
            PidLock(pid_file).acquire()
        assert pid_file.read_text() == f"{os.getpid()}\n"  # the loser did not touch it
    finally:
        first.release()


def test_stale_file_from_a_dead_process_does_not_block(tmp_path: Path) -> None:
    pid_file = tmp_path / "nvidia-driver.pid"
    pid_file.write_text("999999999\n")  # longer than our pid: truncation must not leave digits behind
    with PidLock(pid_file):
        assert pid_file.read_text() == f"{os.getpid()}\n"


def test_release_does_not_remove_a_file_that_is_not_ours(tmp_path: Path) -> None:
    pid_file = tmp_path / "nvidia-driver.pid"
    lock = PidLock(pid_file)
    lock.acquire()
    pid_file.unlink()
    pid_file.write_text("1\n")  # someone replaced it (e.g. an operator's cleanup plus a new instance)
    lock.release()
    assert pid_file.read_text() == "1\n"


def test_unwritable_run_dir_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(LockError, match="cannot open"):
        PidLock(tmp_path / "file/nvidia-driver.pid").acquire()


def test_status_and_state_files(tmp_path: Path) -> None:
    paths = HostPaths(run_dir=tmp_path / "run")
    statusfiles.write_daemons_status(paths, ready=False)
    assert (tmp_path / "run/validations/.driver-daemons-status").read_text() == "NotReady"
    statusfiles.write_daemons_status(paths, ready=True)
    assert statusfiles.read_daemons_status(paths.run) == "Ready"
    statusfiles.write_state(paths, None)
    assert not paths.state_file.exists() and statusfiles.read_state(paths) is None
    statusfiles.write_state(paths, "sha256:0123")
    assert paths.state_file.read_text() == "sha256:0123"
    assert statusfiles.read_state(paths) == "sha256:0123"
