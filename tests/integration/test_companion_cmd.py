"""The GDS / GDRCopy sidecar commands as gpu-operator runs them: the console scripts, a signal, exit codes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.support import FIXTURES
from helpers.waits import wait_until

BIN = Path(sys.executable).parent


def _env(tmp_path: Path, *loaded: str) -> dict[str, str]:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "hosts/talos-1.13-open-595", tree, symlinks=True)
    with (tree / "proc/modules").open("a") as f:
        f.writelines(f"{name} 65536 0 - Live 0x0000000000000000 (O)\n" for name in loaded)
    return {
        **os.environ,
        "PROCFS_ROOT": str(tree / "proc"),
        "SYSFS_ROOT": str(tree / "sys"),
        "HOST_ROOT_MOUNT": str(tree / "host"),
        "HOST_OS_RELEASE": str(tree / "host/etc/os-release"),
    }


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("command", "module"), [("nvidia-gds-driver", "nvidia_fs"), ("nvidia-gdrcopy-driver", "gdrdrv")]
)
def test_install_waits_while_talos_has_the_module_and_stops_on_sigterm(
    tmp_path: Path, command: str, module: str
) -> None:
    log = tmp_path / "log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(BIN / command), "install"], env=_env(tmp_path, module), stderr=out)
    try:
        wait_until(lambda: b"nothing to build or load; waiting" in log.read_bytes(), f"{command} waiting", 20)
        assert proc.poll() is None  # a sidecar that exited would be restarted in a loop
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
        assert time.monotonic() - sent < 2.0
    finally:
        proc.kill()
        proc.wait()
    assert f"SIGTERM received: exiting ({module} stays loaded)".encode() in log.read_bytes()


@pytest.mark.timeout(30)
def test_install_refuses_at_once_without_the_module(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(BIN / "nvidia-gds-driver"), "install"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 1
    assert "nvidia-gds-driver: error: gds.enabled=true (GDS_ENABLED=true), but nvidia_fs is not loaded" in done.stderr
    assert "nvidia-gds-driver: fix: set gds.enabled=false" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.timeout(30)
@pytest.mark.parametrize("argv", [[], ["build"], ["install", "--now"]])
def test_anything_but_install_is_a_usage_error(tmp_path: Path, argv: list[str]) -> None:
    done = subprocess.run(
        [str(BIN / "nvidia-gdrcopy-driver"), *argv],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 2 and "usage: nvidia-gdrcopy-driver install" in done.stderr
