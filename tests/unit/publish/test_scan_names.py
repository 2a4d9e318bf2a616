"""scan._final_name (the cheap path for ld.so.cache entries) agrees with Root.resolve on real trees."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
from helpers.support import ARTEFACTS, FIXTURES, require

from driver_container.base.resolver import Root
from driver_container.publish.scan import _final_name, read_cache

TREES = {
    "synthetic": FIXTURES / "userspace" / "debian-595.91.07",
    "debian-535": ARTEFACTS / "debian-nvidia-535",
}


@pytest.mark.parametrize("tree", sorted(TREES))
def test_cache_entries_resolve_to_the_same_name(tree: str) -> None:
    path = TREES[tree]
    require((path / "etc/ld.so.cache").is_file(), f"{tree} userspace", how="scripts/setup.sh")
    root = Root(path)
    entries = [PurePosixPath(e.value) for e in read_cache(root)]
    assert entries
    dirs: dict[PurePosixPath, Path] = {}
    for inner in [*entries, *(p.parent / "no-such.so.1" for p in entries[:1])]:
        assert _final_name(root, inner, dirs) == root.resolve(inner).name, inner


def test_links_leaving_the_directory_take_the_full_resolution(tmp_path: Path) -> None:
    """A scenario tree built here: same-dir chain, absolute link, link through '..', dangling link."""
    lib = tmp_path / "usr/lib"
    (tmp_path / "opt").mkdir(parents=True)
    lib.mkdir(parents=True)
    (tmp_path / "lib").symlink_to("usr/lib")
    (tmp_path / "opt/libreal.so.9.1").write_bytes(b"")
    (lib / "libc.so.6.0").write_bytes(b"")
    (lib / "libc.so.6").symlink_to("libc.so.6.0")
    (lib / "libc.so").symlink_to("libc.so.6")
    (lib / "libabs.so.1").symlink_to("/opt/libreal.so.9.1")
    (lib / "libup.so.1").symlink_to("../../opt/libreal.so.9.1")
    (lib / "libgone.so.1").symlink_to("libgone.so.1.0")
    root = Root(tmp_path)
    dirs: dict[PurePosixPath, Path] = {}
    expected = {
        "libc.so": "libc.so.6.0",
        "libabs.so.1": "libreal.so.9.1",
        "libup.so.1": "libreal.so.9.1",
        "libgone.so.1": "libgone.so.1.0",
    }
    for name, final in expected.items():
        inner = PurePosixPath("/lib", name)
        assert _final_name(root, inner, dirs) == root.resolve(inner).name == final
