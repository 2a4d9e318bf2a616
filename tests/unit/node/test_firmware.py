from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable

from driver_container.base.paths import HostPaths
from driver_container.node.firmware import FirmwarePathResult, set_firmware_search_path

PARAM = "module/firmware_class/parameters/path"


def test_empty_path_gets_the_host_driver_root(node_host: Callable[[str], HostPaths]) -> None:
    paths = node_host("fw-empty")
    report = set_firmware_search_path(paths.host_driver_root, paths.sys)
    assert report.result is FirmwarePathResult.SET
    # HOST_DRIVER_ROOT, not the container's DRIVER_ROOT: the kernel resolves it in the host namespace.
    assert (paths.sysfs_root / PARAM).read_text() == "/run/nvidia/driver/lib/firmware"
    assert set_firmware_search_path(paths.host_driver_root, paths.sys).result is FirmwarePathResult.ALREADY


def test_kernel_newline_counts_as_empty_and_default_is_driver_root(node_host: Callable[[str], HostPaths]) -> None:
    paths = node_host("fw-empty")
    (paths.sysfs_root / PARAM).write_text("\n")
    paths = HostPaths(sysfs_root=paths.sysfs_root, run_dir=paths.run_dir)  # HOST_DRIVER_ROOT unset
    assert set_firmware_search_path(paths.host_driver_root, paths.sys).result is FirmwarePathResult.SET
    assert (paths.sysfs_root / PARAM).read_text() == f"{paths.run_dir}/driver/lib/firmware"


def test_preset_path_is_left_alone(node_host: Callable[[str], HostPaths], caplog: object) -> None:
    paths = node_host("fw-preset")
    report = set_firmware_search_path(paths.host_driver_root, paths.sys)
    assert report.result is FirmwarePathResult.OTHER and report.found == "/var/lib/firmware-custom"
    assert (paths.sysfs_root / PARAM).read_text() == "/var/lib/firmware-custom\n"


def test_missing_parameter_file(node_host: Callable[[str], HostPaths]) -> None:
    paths = node_host("no-nvidia")
    assert set_firmware_search_path(paths.host_driver_root, paths.sys).result is FirmwarePathResult.MISSING


_RUN = """
import logging, sys
from pathlib import Path
from driver_container.node.firmware import set_firmware_search_path
from driver_container.base.paths import HostPaths
logging.basicConfig(level=logging.WARNING, format="%(message)s")
p = HostPaths(sysfs_root=Path(sys.argv[1]), run_dir=Path(sys.argv[2]))
print(set_firmware_search_path(p.host_driver_root, p.sys).result.value)
"""


def test_read_only_parameter_warns_and_continues(node_host: Callable[[str], HostPaths]) -> None:
    paths = node_host("fw-empty")
    os.chmod(paths.sysfs_root / PARAM, 0o444)  # SELinux-enforcing Talos: the write is refused
    argv = [sys.executable, "-c", _RUN, str(paths.sysfs_root), str(paths.run_dir)]
    if os.geteuid() == 0:  # root ignores file modes unless CAP_DAC_OVERRIDE is gone
        argv = ["setpriv", "--bounding-set=-dac_override", "--inh-caps=-dac_override", "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "read-only"
    assert "not writable" in done.stderr
    assert (paths.sysfs_root / PARAM).read_text() == ""


def test_read_only_sysfs_names_selinux_and_the_kernel_argument(node_host: Callable[[str], HostPaths]) -> None:
    # SELinux-enforcing Talos gives pods a read-only /sys/module: the write fails with EROFS. A read-only
    # bind mount in a private mount namespace reproduces it (gone when the subprocess exits).
    from helpers.support import require

    require(os.geteuid() == 0 and shutil.which("unshare"), "root and unshare (util-linux)", how="run as root")
    paths = node_host("fw-empty")
    module = paths.sysfs_root / "module"
    script = f'mount --bind {module} {module} && mount -o remount,bind,ro {module} && exec "$@"'
    argv = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
        sys.executable,
        "-c",
        _RUN,
        str(paths.sysfs_root),
        str(paths.run_dir),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "read-only"
    assert "EROFS: SELinux enforcing on Talos" in done.stderr
    assert f"firmware_class.path={paths.run_dir}/driver/lib/firmware" in done.stderr
    # Talos's kernel arguments live in the boot assets; the deprecated machine.install route is not offered.
    assert "schematic's customization.extraKernelArgs" in done.stderr and "machine.install" not in done.stderr
    assert (paths.sysfs_root / PARAM).read_text() == ""


def test_denied_write_names_the_cause(node_host: Callable[[str], HostPaths]) -> None:
    paths = node_host("fw-empty")
    os.chmod(paths.sysfs_root / PARAM, 0o444)
    argv = [sys.executable, "-c", _RUN, str(paths.sysfs_root), str(paths.run_dir)]
    if os.geteuid() == 0:
        argv = ["setpriv", "--bounding-set=-dac_override", "--inh-caps=-dac_override", "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    assert "permission denied (EACCES: SELinux enforcing" in done.stderr
    assert "firmware_class.path=" in done.stderr
