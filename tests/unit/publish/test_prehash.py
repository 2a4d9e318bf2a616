"""Digests computed ahead of the copy are used only for the exact source that was hashed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from driver_container.fsutil import stage_copy
from driver_container.publish.prehash import Prehash


def _identity(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path), st.st_size, st.st_mtime_ns


def test_hashes_what_it_is_given_except_skipped(tmp_path: Path) -> None:
    a, b, empty = tmp_path / "a", tmp_path / "b", tmp_path / "empty"
    a.write_bytes(b"a" * 100_000)
    b.write_bytes(b"b")
    empty.write_bytes(b"")
    prehash = Prehash(2)
    try:
        prehash.start([a, b, empty, tmp_path / "missing"], skip={_identity(b)})
        known = prehash.known(a, *_identity(a)[1:])
        assert known is not None and known[:2] == _identity(a)[1:]
        assert known[2]() == hashlib.sha256(a.read_bytes()).hexdigest()
        known_empty = prehash.known(empty, *_identity(empty)[1:])
        assert known_empty is not None and known_empty[2]() == hashlib.sha256().hexdigest()
        assert prehash.known(b, *_identity(b)[1:]) is None  # skipped: already published unchanged
        assert prehash.known(a, 100_000, _identity(a)[2] + 1) is None  # another mtime: another file
    finally:
        prehash.close()


def test_stage_copy_uses_a_known_digest_only_for_an_unchanged_source(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.write_bytes(b"content" * 1000)
    _, size, mtime = _identity(src)
    fake = "0" * 64  # proves the given digest is used, not recomputed
    staged = stage_copy(src, tmp_path / "out/one", mode=0o644, known=(size, mtime, lambda: fake))
    staged.commit()
    assert staged.sha256 == fake
    assert (tmp_path / "out/one").read_bytes() == src.read_bytes()
    os.utime(src, ns=(mtime + 10**9, mtime + 10**9))  # the source changed since it was hashed
    again = stage_copy(src, tmp_path / "out/two", mode=0o644, known=(size, mtime, lambda: fake))
    again.commit()
    assert again.sha256 == hashlib.sha256(src.read_bytes()).hexdigest()


def test_a_hashing_error_is_a_publish_error(tmp_path: Path) -> None:
    import pytest

    from driver_container.errors import PublishError

    odd = tmp_path / "not-a-file"
    odd.mkdir()  # opening works, reading fails (EISDIR): the error comes out of digest()
    prehash = Prehash(1)
    try:
        prehash.start([odd], skip=set())
        known = prehash.known(odd, *_identity(odd)[1:])
        assert known is not None
        with pytest.raises(PublishError, match="not-a-file: cannot read"):
            known[2]()
    finally:
        prehash.close()
