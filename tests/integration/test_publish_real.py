"""Publish Debian's real NVIDIA 535.309.01 userspace (debootstrap chroot) and run its nvidia-smi.

Without a GPU, an nvidia-smi that finds all its libraries prints "couldn't communicate with the NVIDIA
driver" and exits 9; a missing library gives a loader error and exit 127. What
NVIDIA's container toolkit finds in this userspace's published root: tests/integration/test_toolkit_real.py
(535-chroot).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.nvidia_sandbox import run_nvidia
from helpers.support import ARTEFACTS, require

from driver_container.base.paths import HostPaths
from driver_container.publish.publisher import publish_driver_root
from driver_container.runtime.runner import Runner

V = "535.309.01"
USERSPACE = ARTEFACTS / "debian-nvidia-535"
MESSAGE = "couldn't communicate with the NVIDIA driver"

pytestmark = pytest.mark.artefact


@pytest.fixture(scope="module")
def driver_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require((USERSPACE / "usr/bin/nvidia-smi").is_symlink(), f"Debian NVIDIA {V} chroot at {USERSPACE}")
    require(os.geteuid() == 0, "root (chroot)")
    dr = tmp_path_factory.mktemp("real") / "driver"
    paths = HostPaths(
        userspace_root=USERSPACE, driver_root_override=dr, run_dir=dr.parent / "run", procfs_root=Path("/nonexistent")
    )
    report = publish_driver_root(paths, V, Runner())
    assert "usr/bin/nvidia-smi" in report.binaries
    return dr


def test_chrooted_nvidia_smi_reaches_the_driver_check(driver_root: Path) -> None:
    done = run_nvidia(["chroot", str(driver_root), "/usr/bin/nvidia-smi"])
    assert done.returncode == 9, done.stdout + done.stderr
    assert MESSAGE in done.stdout


def test_validator_style_ld_preload(driver_root: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(driver_root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")}
    done = run_nvidia([str(driver_root / "usr/bin/nvidia-smi")], env=env)
    assert done.returncode == 9, done.stdout + done.stderr
    assert MESSAGE in done.stdout


def test_restart_is_a_no_op(driver_root: Path) -> None:
    paths = HostPaths(
        userspace_root=USERSPACE,
        driver_root_override=driver_root,
        run_dir=driver_root.parent / "run",
        procfs_root=Path("/nonexistent"),
    )
    report = publish_driver_root(paths, V, Runner())
    assert (report.written, report.removed, report.ldconfig_ran) == (0, 0, False)


def _host_nvidia_nodes() -> dict[str, tuple[int, int]]:
    return {p.name: (p.lstat().st_ino, p.lstat().st_rdev) for p in Path("/dev").glob("nvidia*")}


def test_nvidia_smi_as_root_leaves_the_hosts_dev_alone(driver_root: Path) -> None:
    """Run as root outside a private /dev, libnvidia-ml once created /dev/nvidiactl on the machine."""
    before = _host_nvidia_nodes()
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(driver_root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")}
    done = run_nvidia(["sh", "-c", '"$0" >/dev/null 2>&1; ls /dev', str(driver_root / "usr/bin/nvidia-smi")], env=env)
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) >= {"null", "zero"}  # it ran against the private /dev
    assert _host_nvidia_nodes() == before
