"""`init` inside the image against a fixture Talos host, publishing into a host directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import run_to_end
from support import FIXTURES, require

pytestmark = pytest.mark.container

HOST = FIXTURES / "hosts" / "talos-1.13-open-595"  # Talos v1.13.6, open 595.91.07 (see its README)


def _fixture_env(host: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in (host / "env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip()
    return env


def _init_once(image: Any, host: Path, run_dir: Path) -> Any:
    # The mounts gpu-operator gives the driver container (gpu-operator-contract.md): os-release at
    # /host-etc/os-release, /proc and /sys (here the fixture's, through PROCFS_ROOT/SYSFS_ROOT), the run
    # dir. The fixture's synthetic userspace replaces the image's, so versions match the fixture host.
    volumes = {
        str(host / "host/etc/os-release"): {"bind": "/host-etc/os-release"},
        str(host / "host"): {"bind": "/host"},
        str(host / "proc"): {"bind": "/fixture/proc"},
        str(host / "sys"): {"bind": "/fixture/sys"},
        str(host / "drivers"): {"bind": "/drivers"},
        str(host / "userspace"): {"bind": "/fixture/userspace"},
        str(run_dir): {"bind": "/run/nvidia", "mode": "rw"},
    }
    env = _fixture_env(host) | {
        "PROCFS_ROOT": "/fixture/proc",
        "SYSFS_ROOT": "/fixture/sys",
        "USERSPACE_ROOT": "/fixture/userspace",
        "RUN_DIR": "/run/nvidia",
        "HOST_DRIVER_ROOT": "/run/nvidia/driver",
    }
    return run_to_end(image, ["init", "--no-wait"], env=env, volumes=volumes)


def test_init_publishes_a_driver_root_visible_from_the_host(image: Any, tmp_path: Path) -> None:
    require(HOST.is_dir(), f"fixture host {HOST}", how="written with the host-inspection fixtures")
    version = _fixture_env(HOST)["DRIVER_VERSION"]
    done = _init_once(image, HOST, tmp_path)
    assert done.exit_code == 0, done.stdout + done.stderr
    root = tmp_path / "driver"
    assert (root / ".driver-container/manifest.json").is_file()
    assert (root / "sbin/ldconfig").is_file()
    assert (root / "etc/ld.so.cache").is_file()
    assert list((root / "usr/lib/x86_64-linux-gnu").glob(f"libnvidia-ml.so.{version}"))
    assert (tmp_path / "validations/.driver-daemons-status").read_text().strip() == "Ready"
    assert not (tmp_path / "nvidia-driver.pid").exists()

    # The startup probe's own checks, as its script does them from the host side.
    assert (root / "usr/bin/nvidia-smi").is_file()
    for link in root.rglob("*"):
        if link.is_symlink():
            assert not str(link.readlink()).startswith("/"), f"absolute link {link}"
            assert link.resolve().is_relative_to(root.resolve()), f"{link} escapes the root"


def test_second_init_on_the_same_run_dir_rewrites_nothing(image: Any, tmp_path: Path) -> None:
    require(HOST.is_dir(), f"fixture host {HOST}", how="written with the host-inspection fixtures")
    first = _init_once(image, HOST, tmp_path)
    assert first.exit_code == 0, first.stdout + first.stderr
    root = tmp_path / "driver"
    before = {p: p.lstat().st_mtime_ns for p in root.rglob("*") if p.name != "nvidia-driver.state"}
    second = _init_once(image, HOST, tmp_path)
    assert second.exit_code == 0, second.stdout + second.stderr
    after = {p: p.lstat().st_mtime_ns for p in root.rglob("*") if p.name != "nvidia-driver.state"}
    assert after == before
