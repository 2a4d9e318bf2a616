"""publish.copier: copies started before the scan ends are used only for the exact source that was copied,
and staging never outlives the publish."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from driver_container.publish.copier import STAGING, Copier
from driver_container.publish.model import SourceFile


def _source(path: Path) -> SourceFile:
    st = path.stat()
    return SourceFile(path, f"USERSPACE_ROOT/{path.name}", st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), None)


def _identity(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path), st.st_size, st.st_mtime_ns


@pytest.fixture
def sources(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "us").mkdir()
    big, small = tmp_path / "us/libbig.so.1.0", tmp_path / "us/fw.bin"
    big.write_bytes(os.urandom(3 << 20))
    small.write_bytes(b"firmware")
    return big, small


def test_staged_copy_is_taken_with_the_planned_mode_and_staging_is_removed(
    tmp_path: Path, sources: tuple[Path, Path]
) -> None:
    big, small = sources
    root = tmp_path / "driver"
    root.mkdir()
    copier = Copier(root, workers=2)
    try:
        copier.start_early([big, small], skip=set())
        assert copier.has_early(_source(big)) and copier.has_early(_source(small))
        staged = copier.take_early(_source(big), 0o644)
        assert staged is not None and staged.tmp.parent == root / STAGING
        assert staged.sha256 == hashlib.sha256(big.read_bytes()).hexdigest() and staged.size == big.stat().st_size
        (root / "lib").mkdir()
        replace(staged, target=root / "lib/libbig.so.1.0").commit()
    finally:
        copier.close()
    published = root / "lib/libbig.so.1.0"
    assert published.read_bytes() == big.read_bytes()
    assert stat.S_IMODE(published.stat().st_mode) == 0o644
    assert published.stat().st_mtime_ns == big.stat().st_mtime_ns  # as cp -a keeps it
    assert sorted(os.listdir(root)) == ["lib"]  # the copy of fw.bin was never taken: gone with staging


def test_skipped_and_changed_sources_are_not_taken(tmp_path: Path, sources: tuple[Path, Path]) -> None:
    big, small = sources
    root = tmp_path / "driver"
    root.mkdir()
    copier = Copier(root, workers=1)
    try:
        copier.start_early([big, small, tmp_path / "us/missing"], skip={_identity(small)})
        assert not copier.has_early(_source(small))  # published unchanged before: no copy
        copied = _source(big)
        os.utime(big, ns=(copied.mtime_ns + 10**9, copied.mtime_ns + 10**9))  # changed since it was copied
        assert copier.take_early(_source(big), 0o644) is None
    finally:
        copier.close()
    assert os.listdir(root) == []


def test_a_non_regular_source_is_not_copied_early(tmp_path: Path) -> None:
    """A directory or FIFO named like a library: the early copier leaves it to the scan, which refuses
    it with its own message (a FIFO opened blocking would hang the publish)."""
    odd = tmp_path / "not-a-file"
    odd.mkdir()
    fifo = tmp_path / "libnvidia-fifo.so.1"
    os.mkfifo(fifo)
    root = tmp_path / "driver"
    root.mkdir()
    copier = Copier(root, workers=1)
    try:
        copier.start_early([odd, fifo], skip=set())
        assert not copier.has_early(_source(odd)) and not copier.has_early(_source(fifo))
    finally:
        copier.close()
    assert os.listdir(root) == []


def test_leftovers_of_a_killed_publish_are_swept(tmp_path: Path) -> None:
    root = tmp_path / "driver"
    (root / STAGING).mkdir(parents=True)
    (root / STAGING / ".0.abc123.dc-tmp").write_bytes(b"half a library")
    (root / ".driver-container/manifest.json").write_text("{}")
    Copier(root).close()  # nothing copied this time; the leftover still goes
    assert os.listdir(root / ".driver-container") == ["manifest.json"]


def test_staging_never_goes_through_a_symlink_out_of_the_root(tmp_path: Path, sources: tuple[Path, Path]) -> None:
    outside = tmp_path / "outside"
    (outside / "staging").mkdir(parents=True)
    (outside / "staging/keep.dc-tmp").write_text("not ours")
    root = tmp_path / "driver"
    root.mkdir()
    (root / ".driver-container").symlink_to(outside)
    Copier(root).close()
    assert (outside / "staging/keep.dc-tmp").exists()  # close does not sweep through the link
    copier = Copier(root)
    try:
        copier.start_early(list(sources), skip=set())  # replaces the link with a directory of its own
    finally:
        copier.close()
    assert sorted(p.name for p in outside.rglob("*")) == ["keep.dc-tmp", "staging"]
    assert not (root / ".driver-container").exists()
