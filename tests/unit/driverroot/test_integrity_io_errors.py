"""DRIVER_ROOT's manifest and directories out of file descriptors: what could not be opened is the I/O
error (EMFILE), never "missing" (runtime/dirtree.py, driverroot/manifest.py, driverroot/integrity.py).
Before, a manifest that could not be opened was "nothing published" (every file rewritten) and every file
of a directory that could not be opened was "missing" (PUBLISHED_FILE_CHANGED)."""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath

import pytest
from helpers.fds import no_free_descriptor

from driver_container.base.errors import PublishError
from driver_container.driverroot.integrity import check_integrity
from driver_container.driverroot.manifest import Manifest, Record, format_manifest, read_manifest
from driver_container.runtime.dirtree import Tree

LIB = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.595.91.07"


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "driver"
    (root / LIB).parent.mkdir(parents=True)
    (root / LIB).write_bytes(b"\x7fELF library")
    (root / ".driver-container").mkdir()
    data = (root / LIB).read_bytes()
    record = Record(LIB, "file", 0o644, len(data), sha256=hashlib.sha256(data).hexdigest())
    (root / LIB).chmod(0o644)
    text = format_manifest(Manifest("595.91.07", "x86_64-linux-gnu", (record,)))
    (root / ".driver-container/manifest.json").write_text(text)
    return root


def test_a_directory_that_cannot_be_opened_for_emfile_is_an_error_not_missing(tmp_path: Path) -> None:
    root = _root(tmp_path)
    tree = Tree(root)
    try:
        assert tree.dir_fd(PurePosixPath("nowhere")) is None  # missing stays missing
        with no_free_descriptor(), pytest.raises(PublishError, match=r"Too many open files \(EMFILE\)"):
            tree.dir_fd(PurePosixPath(LIB).parent)
    finally:
        tree.close()


def test_verify_out_of_descriptors_is_the_emfile_error_never_an_unpublished_root(tmp_path: Path) -> None:
    root = _root(tmp_path)
    assert check_integrity(root).ok and read_manifest(root)[1] is not None
    with no_free_descriptor(), pytest.raises(PublishError, match=r"Too many open files \(EMFILE\)"):
        read_manifest(root)  # before, ("", None): "nothing published", and every file rewritten
    with no_free_descriptor(), pytest.raises(PublishError, match=r"Too many open files \(EMFILE\)"):
        check_integrity(root)
