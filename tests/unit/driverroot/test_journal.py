"""publish.journal: a commit killed after any number of steps, or between the two halves of one step, is
rolled back by ``recover`` to exactly the previous root (files, links, directories, link counts)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from driver_container.driverroot import journal
from driver_container.driverroot.journal import ROLLBACK, STAGING, Step, Transaction, parse_journal, recover


def _previous_root(root: Path) -> None:
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").write_bytes(b"old smi")
    (root / "usr/lib").mkdir()
    (root / "usr/lib/libold.so.1").symlink_to("libold.so.1.0")
    (root / "usr/lib/libold.so.1.0").write_bytes(b"old lib")
    (root / "etc").symlink_to("usr")  # a link where the new root wants a directory
    (root / "lib").mkdir()
    (root / "lib/firmware").mkdir()  # a directory where the new root wants a file
    (root / "lib/firmware/old.bin").write_bytes(b"fw")
    (root / ".driver-container").mkdir()
    (root / ".driver-container/manifest.json").write_text('{"old": true}\n')


def _stage(root: Path) -> list[Step]:
    staging = root / STAGING
    staging.mkdir(parents=True)
    for name in ("smi", "conf", "fw", "new", "manifest"):
        (staging / name).write_bytes(f"new {name}".encode())
    (staging / "link").symlink_to("libnew.so.2.0")
    return [
        Step("mkdir", "etc", True),
        Step("mkdir", "opt", False),
        Step("mkdir", "opt/x", False),
        Step("put", "usr/bin/nvidia-smi", True, "smi"),
        Step("put", "etc/ld.so.conf", False, "conf"),
        Step("put", "lib/firmware", True, "fw"),
        Step("put", "opt/x/new", False, "new"),
        Step("put", "usr/lib/libold.so.1", True, "link"),
        Step("remove", "usr/lib/libold.so.1.0", True),
        Step("put", ".driver-container/manifest.json", True, "manifest"),
    ]


def _without_state(root: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every entry (not following links) with its type+mode, link count, inode and content or target,
    less the commit's own state (staging, rollback area, journal)."""
    skip = {root / STAGING, root / ROLLBACK, root / journal.JOURNAL}
    found = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(dirpath, d) not in skip]
        for name in [*dirs, *files]:
            path = Path(dirpath, name)
            if path in skip:
                continue
            st = os.lstat(path)
            content = ""
            if stat.S_ISLNK(st.st_mode):
                content = os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                content = path.read_text()
            nlink = 0 if stat.S_ISDIR(st.st_mode) else st.st_nlink
            found[str(path.relative_to(root))] = (st.st_mode, nlink, st.st_ino, content)
    return found


@pytest.mark.parametrize("done", range(11))
def test_killed_after_any_step_rolls_back_exactly(tmp_path: Path, done: int) -> None:
    root = tmp_path / "driver"
    _previous_root(root)
    before = _without_state(root)
    steps = _stage(root)
    transaction = Transaction(root, steps)
    transaction.begin()
    transaction.run_until(done)  # then SIGKILL: nothing else runs
    assert recover(root) is True
    assert _without_state(root) == before
    assert not (root / journal.JOURNAL).exists() and not (root / ROLLBACK).exists()
    assert recover(root) is False  # idempotent


@pytest.mark.parametrize("index", [0, 3, 5, 7, 8])
def test_killed_between_the_backup_and_the_rename_of_a_step(tmp_path: Path, index: int) -> None:
    """The first half of a step (old content moved or linked aside) without the second."""
    root = tmp_path / "driver"
    _previous_root(root)
    before = _without_state(root)
    steps = _stage(root)
    transaction = Transaction(root, steps)
    transaction.begin()
    transaction.run_until(index)
    step = steps[index]
    live, kept = root / step.path, root / ROLLBACK / str(index)
    if step.action == "remove" or (live.is_dir() and not live.is_symlink()):
        os.rename(live, kept)
    else:
        os.link(live, kept, follow_symlinks=False)
    recover(root)
    assert _without_state(root) == before


def test_finished_commit_keeps_the_new_root_and_drops_the_old(tmp_path: Path) -> None:
    root = tmp_path / "driver"
    _previous_root(root)
    transaction = Transaction(root, _stage(root))
    transaction.begin()
    transaction.run_until(len(transaction.steps))
    transaction.finish()
    assert (root / "usr/bin/nvidia-smi").read_bytes() == b"new smi"
    assert (root / "lib/firmware").read_bytes() == b"new fw"
    assert os.readlink(root / "usr/lib/libold.so.1") == "libnew.so.2.0"
    assert not (root / "usr/lib/libold.so.1.0").exists()
    assert (root / "etc").is_dir() and not (root / "etc").is_symlink()
    assert os.stat(root / "usr/bin/nvidia-smi").st_nlink == 1
    assert recover(root) is False and not (root / ROLLBACK).exists()


def test_a_rollback_area_left_after_the_commit_point_is_removed(tmp_path: Path) -> None:
    root = tmp_path / "driver"
    (root / ROLLBACK).mkdir(parents=True)
    (root / ROLLBACK / "3").write_bytes(b"old")
    assert recover(root) is False
    assert not (root / ROLLBACK).exists()


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xfe",
        b"[]",
        b'{"format": 1, "steps": [["put", "../../x", true, "a"]]}',
        b'{"format": 1, "steps": [["put", "a", "yes", "a"]]}',
        b'{"format": 1, "steps": [["put", "a", true, "../a"]]}',
        b'{"format": 1, "steps": [["chmod", "a", true, "a"]]}',
        b'{"format": 2, "steps": []}',
    ],
)
def test_damaged_journal_is_refused(data: bytes) -> None:
    assert parse_journal(data) is None


def test_damaged_journal_is_dropped_without_touching_anything(tmp_path: Path) -> None:
    root = tmp_path / "driver"
    _previous_root(root)
    before = _without_state(root)
    (root / journal.JOURNAL).write_bytes(b'{"format": 1, "steps": [["remove", "../../outside", true, ""]]}')
    (tmp_path / "outside").write_text("not ours")
    assert recover(root) is False
    assert _without_state(root) == before and (tmp_path / "outside").read_text() == "not ours"
    assert not (root / journal.JOURNAL).exists()
