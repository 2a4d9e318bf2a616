"""Fixtures the unit tests of several rooms share."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.support import require


@pytest.fixture
def kmod_modinfo() -> object:
    """kmod's /sbin/modinfo as the oracle: modinfo(*args) -> stdout bytes."""
    tool = shutil.which("modinfo") or ("/sbin/modinfo" if Path("/sbin/modinfo").exists() else None)
    require(tool, "kmod's modinfo", how="apt-get install kmod")

    def run(*args: str | Path) -> bytes:
        return subprocess.run([str(tool), *map(str, args)], capture_output=True, check=False).stdout

    return run
