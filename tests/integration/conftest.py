"""Fixtures shared by the integration tests: a private copy of the synthetic 595.91.07 userspace."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.support import FIXTURES, SYNTHETIC_VERSION, require

SYNTHETIC_USERSPACE = FIXTURES / "userspace" / f"debian-{SYNTHETIC_VERSION}"


@pytest.fixture
def userspace(tmp_path: Path) -> Path:
    """A copy of the synthetic userspace the test may change (tests/fixtures/userspace/build.sh)."""
    require(SYNTHETIC_USERSPACE.is_dir(), "synthetic userspace", how="tests/fixtures/userspace/build.sh")
    dest = tmp_path / "userspace"
    shutil.copytree(SYNTHETIC_USERSPACE, dest, symlinks=True)
    return dest
