"""pytest-timeout is configured: a hanging test fails (with its stack) instead of stalling CI."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from helpers.support import REPO


def test_default_timeout_is_configured() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert "\ntimeout = 300\n" in text and "pytest-timeout" in text


def test_a_hanging_test_fails(tmp_path: Path) -> None:
    (tmp_path / "test_hang.py").write_text("import time\n\ndef test_hang():\n    time.sleep(60)\n")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "timeout=2", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout
    assert "Timeout" in done.stdout
    assert time.monotonic() - started < 40
