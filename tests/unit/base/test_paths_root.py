"""``Root``: resolution as after chroot(root), and bounded reads that never leave the root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from driver_container.base.errors import HostFileNotFound, HostReadError, SymlinkLoopError
from driver_container.base.paths import HostPaths
from driver_container.base.resolver import Root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/ with an absolute link, a relative link climbing above the root, a loop and a directory
    where a file is expected; outside/secret is a file next to the root that must never be read."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/secret").write_text("host secret\n")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text("ID=talos\n")
    (root / "outside").mkdir()
    (root / "outside/secret").write_text("in-root copy\n")
    os.symlink("/etc/os-release", root / "abs-link")
    os.symlink("../../../outside/secret", root / "etc/climb")
    os.symlink("loop-b", root / "loop-a")
    os.symlink("loop-a", root / "loop-b")
    (root / "dir-not-file").mkdir()
    return root


@pytest.mark.parametrize("snapshot", [False, True])
def test_links_resolve_inside_the_root(tree: Path, snapshot: bool) -> None:
    root = Root(tree).snapshot() if snapshot else Root(tree)
    assert root.resolve("abs-link") == tree / "etc/os-release"
    assert root.read_text("abs-link") == "ID=talos\n"
    assert root.resolve("etc/climb") == tree / "outside/secret"  # `..` stops at the root
    assert root.read_text("etc/climb") == "in-root copy\n"
    assert root.resolve("/missing/tail") == tree / "missing/tail"
    assert root.resolve("abs-link", follow_last=False) == tree / "abs-link"


def test_loops_and_non_files_are_clear_errors(tree: Path) -> None:
    root = Root(tree)
    with pytest.raises(SymlinkLoopError, match="too many levels of symbolic links"):
        root.resolve("loop-a")
    with pytest.raises(HostReadError, match="dir-not-file: not a regular file"):
        root.read_text_or_none("dir-not-file")
    with pytest.raises(HostFileNotFound):
        root.read_bytes("nothing-here")
    assert root.read_text_or_none("nothing-here") is None


def test_reads_are_bounded(tree: Path) -> None:
    (tree / "big").write_bytes(b"x" * 101)
    with pytest.raises(HostReadError, match="larger than 100 bytes"):
        Root(tree).read_bytes("big", limit=100)
    assert Root(tree).read_bytes("big", limit=101) == b"x" * 101


def test_host_paths_defaults_and_overrides() -> None:
    default = HostPaths.from_env({})
    assert (default.host_root, default.run_dir, default.driver_root) == (
        Path("/host"),
        Path("/run/nvidia"),
        Path("/run/nvidia/driver"),
    )
    assert default.host_driver_root == default.driver_root
    custom = HostPaths.from_env({"RUN_DIR": "/tmp/r", "DRIVER_ROOT": "", "HOST_DRIVER_ROOT": "/run/nvidia/driver"})
    assert custom.driver_root == Path("/tmp/r/driver")  # empty means default
    assert custom.host_driver_root == Path("/run/nvidia/driver")
