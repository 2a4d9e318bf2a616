from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.support import require

from driver_container.base.errors import HostReadError
from driver_container.base.paths import HostPaths
from driver_container.node.devices import DeviceNode, chroot_nodes, create_device_nodes, plan_device_nodes


def _names(nodes: tuple[DeviceNode, ...]) -> dict[str, tuple[int, int, int]]:
    return {n.name: (n.major, n.minor, n.mode) for n in nodes}


def test_two_gpus_and_mig_caps(node_host: Callable[[str], HostPaths]) -> None:
    nodes = _names(plan_device_nodes(node_host("h100x2-mig").proc))
    assert nodes == {
        "nvidiactl": (195, 255, 0o666),
        "nvidia-modeset": (195, 254, 0o666),
        "nvidia0": (195, 0, 0o666),
        "nvidia1": (195, 1, 0o666),
        "nvidia-uvm": (237, 0, 0o666),
        "nvidia-uvm-tools": (237, 1, 0o666),
        # config 0400, the rest 0444: from proc/driver/nvidia/capabilities where registered (1, 2, 12, 13),
        # else the mode the resource manager registers them with (3, 4, 138).
        "nvidia-caps/nvidia-cap1": (236, 1, 0o400),
        "nvidia-caps/nvidia-cap2": (236, 2, 0o444),
        "nvidia-caps/nvidia-cap3": (236, 3, 0o444),
        "nvidia-caps/nvidia-cap4": (236, 4, 0o444),
        "nvidia-caps/nvidia-cap12": (236, 12, 0o444),
        "nvidia-caps/nvidia-cap13": (236, 13, 0o444),
        "nvidia-caps/nvidia-cap138": (236, 138, 0o444),
    }


def test_cap_mode_is_the_registered_one_and_a_disagreeing_file_is_ignored(
    node_host: Callable[[str], HostPaths], caplog: pytest.LogCaptureFixture
) -> None:
    paths = node_host("h100x2-mig")
    caps = paths.procfs_root / "driver/nvidia/capabilities"
    (caps / "mig/monitor").write_text("DeviceFileMinor: 2\nDeviceFileMode: 288\nDeviceFileModify: 1\n")  # 0440
    (caps / "gpu0/mig/gi1/access").write_text("DeviceFileMinor: 99\nDeviceFileMode: 438\nDeviceFileModify: 1\n")
    (caps / "mig/config").write_text("DeviceFileMinor: 1\n")  # no mode: the default, never 0666
    nodes = _names(plan_device_nodes(paths.proc))
    assert nodes["nvidia-caps/nvidia-cap2"] == (236, 2, 0o440)
    assert nodes["nvidia-caps/nvidia-cap12"] == (236, 12, 0o444)
    assert nodes["nvidia-caps/nvidia-cap1"] == (236, 1, 0o400)
    warned = [r.getMessage() for r in caplog.records if "names another minor" in r.getMessage()]
    assert len(warned) == 2 and any("gpu0/mig/gi1/access" in w for w in warned), warned


def test_old_frontend_major_and_sparse_minor(node_host: Callable[[str], HostPaths]) -> None:
    nodes = _names(plan_device_nodes(node_host("frontend-535").proc))
    assert nodes == {
        "nvidiactl": (195, 255, 0o666),
        "nvidia-modeset": (195, 254, 0o666),
        "nvidia3": (195, 3, 0o666),
        "nvidia-uvm": (240, 0, 0o666),
        "nvidia-uvm-tools": (240, 1, 0o666),
    }


def test_no_driver_loaded_means_no_nodes(node_host: Callable[[str], HostPaths]) -> None:
    assert plan_device_nodes(node_host("no-nvidia").proc) == ()


def test_missing_proc_devices_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(HostReadError, match=r"proc/devices: missing"):
        plan_device_nodes(HostPaths(procfs_root=tmp_path / "proc", run_dir=tmp_path / "run").proc)


@pytest.mark.root
def test_created_nodes_have_real_type_numbers_and_mode(node_host: Callable[[str], HostPaths]) -> None:
    require(os.geteuid() == 0, "root (CAP_MKNOD) to create device nodes", how="run the tests as root")
    paths = node_host("h100x2-mig")
    old_umask = os.umask(0o077)  # the mode must not depend on the umask
    try:
        report = create_device_nodes(paths.driver_root, plan_device_nodes(paths.proc))
    finally:
        os.umask(old_umask)
    assert report.not_permitted == ()
    assert len(report.created) == 13
    st_cap = os.lstat(paths.driver_root / "dev/nvidia-caps/nvidia-cap138")
    st_uvm = os.lstat(paths.driver_root / "dev/nvidia-uvm-tools")
    st_config = os.lstat(paths.driver_root / "dev/nvidia-caps/nvidia-cap1")
    for st_node, major, minor, mode in ((st_cap, 236, 138, 0o444), (st_uvm, 237, 1, 0o666), (st_config, 236, 1, 0o400)):
        assert stat.S_ISCHR(st_node.st_mode)
        assert (os.major(st_node.st_rdev), os.minor(st_node.st_rdev)) == (major, minor)
        assert stat.S_IMODE(st_node.st_mode) == mode
    before = os.lstat(paths.driver_root / "dev/nvidia0").st_ino
    again = create_device_nodes(paths.driver_root, plan_device_nodes(paths.proc))
    assert again.created == () and len(again.unchanged) == 13
    assert os.lstat(paths.driver_root / "dev/nvidia0").st_ino == before  # idempotent: not recreated


@pytest.mark.root
def test_wrong_existing_node_is_replaced(node_host: Callable[[str], HostPaths]) -> None:
    require(os.geteuid() == 0, "root (CAP_MKNOD) to create device nodes", how="run the tests as root")
    paths = node_host("frontend-535")
    (paths.driver_root / "dev").mkdir(parents=True)
    os.mknod(paths.driver_root / "dev/nvidia-uvm", stat.S_IFCHR | 0o600, os.makedev(511, 0))
    report = create_device_nodes(paths.driver_root, plan_device_nodes(paths.proc))
    assert "nvidia-uvm" in report.created
    st_uvm = os.lstat(paths.driver_root / "dev/nvidia-uvm")
    assert os.major(st_uvm.st_rdev) == 240 and stat.S_IMODE(st_uvm.st_mode) == 0o666


_NO_MKNOD = """
import logging, sys
from pathlib import Path
from driver_container.node.devices import DeviceNode, create_device_nodes
logging.basicConfig(level=logging.WARNING, format="%(message)s")
r = create_device_nodes(Path(sys.argv[1]), (DeviceNode("nvidiactl", 195, 255), DeviceNode("nvidia0", 195, 0)))
print(",".join(r.not_permitted))
"""


def test_mknod_not_permitted_is_a_warning_listing_the_nodes(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", _NO_MKNOD, str(tmp_path / "driver")]
    if os.geteuid() == 0:  # root: drop CAP_MKNOD for real, as in an unprivileged container
        argv = ["setpriv", "--bounding-set=-mknod", "--inh-caps=-mknod", "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "nvidiactl,nvidia0"
    assert "device nodes not created" in done.stderr and "nvidiactl, nvidia0" in done.stderr
    assert not (tmp_path / "driver/dev/nvidiactl").exists()


def test_dev_null_comes_with_the_roots_shell_only(tmp_path: Path) -> None:
    # nvidia-cuda-mps-control -d, chrooted by NVIDIA's DRA driver through <root>/bin/sh, exits 1 without
    # the root's /dev/null (tests/integration/test_mps_real.py); nothing else chroots into the root with a shell.
    root = tmp_path / "driver"
    (root / "bin").mkdir(parents=True)
    assert chroot_nodes(root) == ()
    (root / "bin/sh").symlink_to("/bin/sh")  # a link is not the root's own shell
    assert chroot_nodes(root) == ()
    (root / "bin/sh").unlink()
    (root / "bin/sh").write_bytes(b"\x7fELF")
    assert chroot_nodes(root) == (DeviceNode("null", 1, 3, 0o666),)
    (root / "bin").rename(root / "elsewhere")
    (root / "bin").symlink_to("elsewhere")  # nor one reached through a link
    assert chroot_nodes(root) == ()
