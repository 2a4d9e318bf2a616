"""tests/gpu/check.sh is only run on a GPU machine; here: its shell syntax, and that on a machine
without the NVIDIA modules it stops at once with a readable FAIL summary and changes nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from support import REPO, require

SCRIPT = REPO / "tests" / "gpu" / "check.sh"


def test_shell_syntax() -> None:
    require(shutil.which("bash"), "bash")
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert os.access(SCRIPT, os.X_OK)


def test_without_nvidia_modules_fails_clearly_and_cleans_up(tmp_path: Path) -> None:
    require(not Path("/proc/driver/nvidia/version").exists(), "a machine WITHOUT the NVIDIA driver")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL  NVIDIA kernel module loaded: /proc/driver/nvidia/version missing" in done.stdout
    assert done.stdout.rstrip().endswith("RESULT: FAIL")
    assert list(tmp_path.iterdir()) == []  # the work directory is removed on exit
