"""staged.atomic_copy / stage_copy: content, mode, hash, mtime, no leftovers, containment."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from driver_container.base.errors import PublishError
from driver_container.runtime.staged import COPY_CHUNK, atomic_copy, stage_copy, stage_write


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src" / "libnvidia-ml.so.535.309.01"
    src.parent.mkdir()
    # Not a multiple of the chunk size, so the last partial chunk is exercised too.
    src.write_bytes(os.urandom(2 * COPY_CHUNK + 12345))
    return src


def test_content_mode_hash_and_mtime(source: Path, tmp_path: Path) -> None:
    root = tmp_path / "driver"
    target = root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.309.01"
    digest = atomic_copy(source, target, mode=0o755, root=root, mtime_ns=1_700_000_000_123_456_789)
    data = source.read_bytes()
    assert target.read_bytes() == data
    assert digest == hashlib.sha256(data).hexdigest()
    st = target.stat()
    assert stat.S_IMODE(st.st_mode) == 0o755
    assert st.st_mtime_ns == 1_700_000_000_123_456_789
    assert os.listdir(target.parent) == [target.name]  # no temporary left behind


def test_mode_is_exact_whatever_the_umask(source: Path, tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        atomic_copy(source, tmp_path / "out", mode=0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o644


def test_replaces_an_existing_file_by_rename(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.write_text("old")
    before = target.stat().st_ino
    atomic_copy(source, target, mode=0o644)
    assert target.read_bytes() == source.read_bytes()
    assert target.stat().st_ino != before  # a new inode: readers holding the old one keep the old content


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    assert atomic_copy(tmp_path / "empty", tmp_path / "copy", mode=0o644) == hashlib.sha256(b"").hexdigest()


def test_staged_content_is_invisible_until_commit(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "out"
    staged = stage_copy(source, target, mode=0o644, suffix=".dc-tmp")
    assert not target.exists() and staged.tmp.name.endswith(".dc-tmp") and staged.tmp.parent == tmp_path
    assert staged.size == source.stat().st_size
    staged.commit()
    assert target.read_bytes() == source.read_bytes() and not staged.tmp.exists()


def test_stage_write_then_discard(tmp_path: Path) -> None:
    staged = stage_write(tmp_path / "conf", b"/usr/lib/x86_64-linux-gnu\n", mode=0o644)
    assert staged.sha256 == hashlib.sha256(b"/usr/lib/x86_64-linux-gnu\n").hexdigest()
    staged.discard()
    assert os.listdir(tmp_path) == []


def test_symlinked_parent_directory_is_refused(source: Path, tmp_path: Path) -> None:
    root = tmp_path / "driver"
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "usr/lib").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu").symlink_to(outside)
    with pytest.raises(PublishError, match=r"x86_64-linux-gnu: is a symlink; refusing to write through it"):
        atomic_copy(source, root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", mode=0o644, root=root)
    assert os.listdir(outside) == []


def test_target_outside_its_root_is_refused(source: Path, tmp_path: Path) -> None:
    with pytest.raises(PublishError, match="outside its root"):
        atomic_copy(source, tmp_path / "elsewhere", mode=0o644, root=tmp_path / "driver")


def test_symlink_as_source_is_refused(source: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(source)
    with pytest.raises(PublishError, match=r"link: cannot read"):
        atomic_copy(link, tmp_path / "out", mode=0o644)
    assert not (tmp_path / "out").exists()
