from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import require


@pytest.fixture
def kmod_modinfo() -> object:
    """kmod's /sbin/modinfo as the oracle: modinfo(*args) -> stdout bytes."""
    tool = shutil.which("modinfo") or ("/sbin/modinfo" if Path("/sbin/modinfo").exists() else None)
    require(tool, "kmod's modinfo", how="apt-get install kmod")

    def run(*args: str | Path) -> bytes:
        return subprocess.run([str(tool), *map(str, args)], capture_output=True, check=False).stdout

    return run
