"""A Talos fixture host as another Talos release would show it (the unit tests of Talos facts and of the
operator's settings on Talos share it)."""

from __future__ import annotations

import shutil
from pathlib import Path

from helpers.support import FIXTURES

HOSTS = FIXTURES / "hosts"


def talos_tree(tmp_path: Path, version: str = "v1.13.9", scenario: str = "talos-1.13-open-595") -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(HOSTS / scenario, tree, symlinks=True)
    release = tree / "host/etc/os-release"
    release.write_text(release.read_text().replace("v1.13.9", version))
    return tree
