"""tests/gpu/check.sh runs on real GPU machines; here it runs against copied fixture hosts
(CHECK_HOST_ROOT, CHECK_PROC, CHECK_SYS, CHECK_DEV), so nothing depends on whether this machine has a GPU:

- without the NVIDIA modules it stops at once with a readable FAIL summary and removes its work dir;
- on a non-Talos host with the modules loaded, ``init`` keeps them (no refusing module-tool stub is
  called) and an empty firmware search path is empty again afterwards (a zero-byte
  write is a no-op in sysfs, so the old script left init's path set).

The fixture sysfs attribute is a regular file, where a NUL byte is stored as written; the script reads
it back without NULs, as it reads the real attribute.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.support import FIXTURES, REPO, require

SCRIPT = REPO / "tests" / "gpu" / "check.sh"
USERSPACE = FIXTURES / "userspace" / "debian-595.91.07"
pytestmark = pytest.mark.root


def test_shell_syntax() -> None:
    require(shutil.which("bash"), "bash")
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert os.access(SCRIPT, os.X_OK)


def _host(tmp_path: Path, scenario: str) -> dict[str, str]:
    tree = tmp_path / "host-tree"
    shutil.copytree(FIXTURES / "hosts" / scenario, tree, symlinks=True)
    param = tree / "sys/module/firmware_class/parameters/path"
    param.parent.mkdir(parents=True, exist_ok=True)
    param.write_text("")  # the kernel default: no custom path
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/nvidiactl").write_text("")  # a node that was there before the check stays
    (tmp_path / "work").mkdir()
    return {
        **os.environ,
        "TMPDIR": str(tmp_path / "work"),
        "CHECK_HOST_ROOT": str(tree / "host"),
        "CHECK_PROC": str(tree / "proc"),
        "CHECK_SYS": str(tree / "sys"),
        "CHECK_DEV": str(tmp_path / "dev"),
        "USERSPACE_ROOT": str(USERSPACE),
    }


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    require(os.geteuid() == 0, "root (the script refuses to run without it)")
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=240, env=env, check=False)


def test_without_nvidia_modules_fails_clearly_and_cleans_up(tmp_path: Path) -> None:
    env = _host(tmp_path, "talos-1.13-open-595")
    shutil.rmtree(Path(env["CHECK_PROC"]) / "driver")
    done = _run(env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"FAIL  NVIDIA kernel module loaded: {env['CHECK_PROC']}/driver/nvidia/version missing" in done.stdout
    assert done.stdout.rstrip().endswith("RESULT: FAIL")
    assert list((tmp_path / "work").iterdir()) == []  # the work directory is removed on exit


def test_generic_host_keeps_its_modules_and_gets_its_empty_firmware_path_back(tmp_path: Path) -> None:
    env = _host(tmp_path, "ubuntu-24.04-dkms")
    done = _run(env)
    out = done.stdout + done.stderr
    assert "PASS  init" in done.stdout, out
    assert "PASS  no module tools called" in done.stdout, out
    assert "PASS  firmware search path restored (empty)" in done.stdout, out
    param = Path(env["CHECK_SYS"]) / "module/firmware_class/parameters/path"
    assert param.read_bytes().strip(b"\0") == b""
    assert (tmp_path / "dev/nvidiactl").exists()
    assert list((tmp_path / "work").iterdir()) == []
