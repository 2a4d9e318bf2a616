"""staged: copies with a known digest (the image's index) go through copy_file_range/sendfile, bounded by
the size the source had when opened, exactly as the hashing copy is."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from driver_container.base.errors import PublishError
from driver_container.runtime import staged
from driver_container.runtime.staged import COPY_CHUNK, _copy_in_kernel, digest_regular, stage_copy

KNOWN = "ab" * 32


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src.so.1"
    src.write_bytes(os.urandom(3 * COPY_CHUNK + 777))
    return src


def test_a_known_digest_is_recorded_and_the_bytes_copied_exactly(source: Path, tmp_path: Path) -> None:
    root = tmp_path / "driver"
    got = stage_copy(source, root / "usr/lib/x.so.1", mode=0o644, root=root, sha256=KNOWN, mtime_ns=10**18)
    assert got.sha256 == KNOWN and got.from_index and got.size == source.stat().st_size
    assert got.tmp.read_bytes() == source.read_bytes()
    hashed = stage_copy(source, root / "usr/lib/y.so.1", mode=0o644, root=root)
    assert hashed.sha256 == hashlib.sha256(source.read_bytes()).hexdigest() and not hashed.from_index


@pytest.mark.parametrize("chunk", [1 << 30, 4096])
def test_a_source_longer_than_its_opened_size_is_refused(
    source: Path, tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(staged, "KERNEL_CHUNK", chunk)
    size = source.stat().st_size
    src = os.open(source, os.O_RDONLY)
    out = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(PublishError, match="grew past"):
            _copy_in_kernel(src, out, size - 100)  # as if it grew by 100 bytes after fstat
        os.lseek(src, 0, os.SEEK_SET)
        os.ftruncate(out, 0)
        os.lseek(out, 0, os.SEEK_SET)
        assert _copy_in_kernel(src, out, size) == size
        assert os.fstat(out).st_size == size
    finally:
        os.close(src)
        os.close(out)


def test_digest_regular_is_bounded(source: Path) -> None:
    fd = os.open(source, os.O_RDONLY)
    try:
        with pytest.raises(PublishError):
            digest_regular(fd, 10)
    finally:
        os.close(fd)
