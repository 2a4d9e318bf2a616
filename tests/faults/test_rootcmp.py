"""rootcmp.leftovers must see the names a publish really leaves (it once matched none of them)."""

from __future__ import annotations

from pathlib import Path

from helpers.rootcmp import leftovers


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
