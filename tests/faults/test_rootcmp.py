"""rootcmp.leftovers must see the names a publish really leaves (it once matched none of them)."""

from __future__ import annotations

from pathlib import Path

from helpers.mounts import pseudo_mount
from helpers.rootcmp import leftovers
from helpers.trees import snapshot


def test_leftovers_sees_every_temporary_a_publish_makes(tmp_path: Path) -> None:
    names = [
        "usr/lib/.libcuda.so.595.91.07.3f2a9c1b0d4e.dc-tmp",  # apply/copier temporaries
        ".driver-container/.manifest.json.k1ll3d__.tmp",  # fsutil.atomic_write
        ".driver-container/staging",
        ".driver-container/rollback",
        ".driver-container/journal.json",
        "etc/ld.so.cache~",  # ldconfig's own temporary
    ]
    for name in names:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(("staging", "rollback")):
            path.mkdir()
        else:
            path.write_bytes(b"")
    (tmp_path / "usr/lib/libcuda.so.595.91.07").write_bytes(b"published")
    (tmp_path / ".driver-container/manifest.json").write_text("{}")
    assert sorted(leftovers(tmp_path)) == sorted(names)


def test_a_procfs_and_a_sysfs_mounted_in_a_root_are_listed_never_walked(tmp_path: Path) -> None:
    # init mounts them at DRIVER_ROOT/proc and /sys (driver_container/driverroot/procsys.py); walking them would
    # hash /proc/kcore and friends. Real mounts, taken down whatever happens (helpers/mounts.py).
    root = tmp_path / "driver"
    (root / "usr/lib").mkdir(parents=True)
    (root / "usr/lib/libcuda.so.595.91.07").write_bytes(b"published")
    with pseudo_mount(root / "proc", "proc"), pseudo_mount(root / "sys", "sysfs"):
        assert (root / "proc/self").is_symlink() and (root / "sys/kernel").is_dir()  # really mounted
        files = snapshot(root, content=False)  # without the pruning: thousands of entries, none read
        assert leftovers(root) == []
    assert sorted(files) == ["proc", "sys", "usr", "usr/lib", "usr/lib/libcuda.so.595.91.07"]
