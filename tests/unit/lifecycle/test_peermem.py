from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.support import NODE_FIXTURES

from driver_container.base.paths import HostPaths
from driver_container.lifecycle.peermem import probe

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("scenario", "healthy"), [("peermem-missing", False), ("peermem-loaded", True), ("no-mellanox", True)]
)
def test_probe_semantics(scenario: str, healthy: bool) -> None:
    ok, reason = probe(HostPaths(procfs_root=NODE_FIXTURES / scenario / "proc"))
    assert ok is healthy
    if not healthy:
        assert "mlx5_core is loaded but nvidia_peermem is not" in reason


def test_probe_passes_on_talos_where_peermem_cannot_load() -> None:
    # mlx5_core loaded, no nvidia_peermem, kernel 6.18.44-talos: NVIDIA's rule would fail the liveness
    # probe forever, restarting the sidecar in a loop.
    ok, reason = probe(HostPaths(procfs_root=NODE_FIXTURES / "peermem-talos" / "proc"))
    assert ok is True
    assert "cannot load on Talos" in reason and "DMA-BUF" in reason


def test_no_proc_modules_passes(tmp_path: Path) -> None:
    assert probe(HostPaths(procfs_root=tmp_path))[0] is True


@pytest.mark.parametrize(
    ("scenario", "code"), [("peermem-missing", 1), ("peermem-loaded", 0), ("no-mellanox", 0), ("peermem-talos", 0)]
)
def test_probe_command_exit_codes(scenario: str, code: int) -> None:
    env = {**os.environ, "PROCFS_ROOT": str(NODE_FIXTURES / scenario / "proc")}
    done = subprocess.run(
        [sys.executable, "-m", "driver_container", "probe_nvidia_peermem"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == code, done.stderr
    assert ("nvidia_peermem is not" in done.stderr) is (code == 1)


@pytest.mark.parametrize(("scenario", "code"), [("peermem-missing", 1), ("no-mellanox", 0), ("peermem-talos", 0)])
def test_fast_path_without_typer(scenario: str, code: int) -> None:
    script = (
        "import os, sys\nfrom driver_container.lifecycle.peermem import probe\n"
        "from driver_container.base.paths import HostPaths\n"
        "heavy = {'typer', 'elftools', 'requests', 'zstandard', 'subprocess'} & set(sys.modules)\n"
        "assert not heavy, heavy\nsys.exit(0 if probe(HostPaths.from_env(os.environ))[0] else 1)"
    )
    env = {**os.environ, "PROCFS_ROOT": str(NODE_FIXTURES / scenario / "proc")}
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == code, done.stderr


def test_probe_through_typer_with_global_option() -> None:
    # With a global option the console script takes the typer path instead of its fast path.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "driver_container",
            "--procfs-root",
            str(NODE_FIXTURES / "peermem-missing/proc"),
            "probe_nvidia_peermem",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 1, done.stderr
    assert "mlx5_core is loaded but nvidia_peermem is not" in done.stderr
