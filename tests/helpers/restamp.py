"""Fixture trees re-stamped to another NVIDIA driver and Talos release, for the operator-rendered flows
(tests/integration/test_operator_rolling.py, test_operator_upgrade.py).

The Talos host talos-1.13-open-595 and the synthetic userspace (tests/helpers/hostenv.py ``HOSTS``,
``USERSPACE``) say driver ``FIXTURE_DRIVER`` and release ``FIXTURE_RELEASE``. A copy with every byte
string, link target and file name of those replaced by a driver and release of equal length (595.71.05,
v1.13.8, ...) is the same host or image for that driver and release: module files keep their layout.
"""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURE_DRIVER, FIXTURE_RELEASE = "595.91.07", "v1.13.9"  # what talos-1.13-open-595 and USERSPACE say


def restamped_pairs(source: Path, dest: Path, pairs: list[tuple[str, str]]) -> Path:
    """A copy of a fixture tree whose files, link targets and names say each pair's second string instead
    of its first (equal lengths, so module files keep their layout)."""
    shutil.copytree(source, dest, symlinks=True)
    assert all(len(old) == len(new) for old, new in pairs)
    for path in sorted(dest.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            for old, new in pairs:
                data = data.replace(old.encode(), new.encode())
            path.write_bytes(data)
        if path.is_symlink():
            target = str(path.readlink())
            path.unlink()
            for old, new in pairs:
                target = target.replace(old, new)
            path.symlink_to(target)
        name = path.name
        for old, new in pairs:
            name = name.replace(old, new)
        if name != path.name:
            path.rename(path.with_name(name))
    return dest


def restamped(source: Path, dest: Path, driver: str, release: str) -> Path:
    """A copy of ``source`` at ``dest`` whose files and names say ``driver`` and ``release``."""
    pairs = [(FIXTURE_DRIVER, driver), (FIXTURE_RELEASE, release)]
    if not all(len(old) == len(new) for old, new in pairs):
        raise ValueError(f"{driver} and {release} must be as long as {FIXTURE_DRIVER} and {FIXTURE_RELEASE}")
    return restamped_pairs(source, dest, pairs)
