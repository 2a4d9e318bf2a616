"""publish.copier: copies started before the scan ends are used only for the exact source that was copied,
and staging never outlives the publish."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest
from support import require

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
        (root / "lib").mkdir()
        staged = copier.take_early(_source(big), root / "lib/libbig.so.1.0", 0o644)
        assert staged is not None and staged.tmp.parent == root / STAGING
        assert staged.sha256 == hashlib.sha256(big.read_bytes()).hexdigest() and staged.size == big.stat().st_size
        staged.commit()
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
        assert copier.take_early(_source(big), root / "libbig.so.1.0", 0o644) is None
    finally:
        copier.close()
    assert os.listdir(root) == []


def test_a_failed_early_copy_falls_back_to_the_normal_path(tmp_path: Path) -> None:
    odd = tmp_path / "not-a-file"
    odd.mkdir()  # opening works, reading fails (EISDIR): the normal copy reports it with its own message
    root = tmp_path / "driver"
    root.mkdir()
    copier = Copier(root, workers=1)
    try:
        copier.start_early([odd], skip=set())
        assert copier.has_early(_source(odd))
        assert copier.take_early(_source(odd), root / "x", 0o644) is None
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


def test_another_filesystem_below_the_root_is_copied_normally(tmp_path: Path, sources: tuple[Path, Path]) -> None:
    require(os.geteuid() == 0, "root (mount tmpfs)")
    big, _ = sources
    root = tmp_path / "driver"
    (root / "lib").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(root / "lib")], check=True)
    try:
        copier = Copier(root)
        try:
            copier.start_early([big], skip=set())
            assert copier.take_early(_source(big), root / "lib/libbig.so.1.0", 0o644) is None  # rename: EXDEV
        finally:
            copier.close()
    finally:
        subprocess.run(["umount", str(root / "lib")], check=True)
    assert os.listdir(root) == ["lib"]
