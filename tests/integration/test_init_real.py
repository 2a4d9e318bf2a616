"""`nvidia-driver init --no-wait` end to end: a Talos 1.11 host with the proprietary kmod extension 535.309.01
(tests/fixtures/hosts/talos-1.11-kmod-535) and Debian's real 535.309.01 userspace (debootstrap chroot).

The command runs as a subprocess, exactly as the container's entrypoint runs it. Without a GPU an
nvidia-smi that finds all its libraries prints "couldn't communicate with the NVIDIA driver" and exits 9;
a missing library is a loader error, exit 127.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.fakes import node_env
from helpers.nvidia_sandbox import run_nvidia
from helpers.support import ARTEFACTS, FIXTURES, REPO, require

V = "535.309.01"
HOST = FIXTURES / "hosts" / "talos-1.11-kmod-535"
USERSPACE = ARTEFACTS / "debian-nvidia-535"
MESSAGE = "couldn't communicate with the NVIDIA driver"
CLI = Path(sys.executable).parent / "nvidia-driver"

pytestmark = pytest.mark.artefact


@dataclass(frozen=True)
class Node:
    env: dict[str, str]
    run_dir: Path

    @property
    def driver_root(self) -> Path:
        return self.run_dir / "driver"


def _cli(node: Node, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), *args], env=node.env, capture_output=True, text=True, check=False, timeout=120, cwd=REPO
    )


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Node:
    require((USERSPACE / "usr/bin/nvidia-smi").is_symlink(), f"Debian NVIDIA {V} chroot at {USERSPACE}")
    require(os.geteuid() == 0, "root (chroot, mknod)")
    assert CLI.is_file(), f"{CLI}: the package's console script is not installed in this interpreter's venv"
    base = tmp_path_factory.mktemp("init-real")
    # A private copy: init writes the firmware search path under SYSFS_ROOT (docs/init.md).
    host = Path(shutil.copytree(HOST, base / "host-fixture", symlinks=True))
    found = Node(node_env(host, USERSPACE, base / "run"), base / "run")
    done = _cli(found, "init", "--no-wait")
    assert done.returncode == 0, done.stdout + done.stderr
    return found


def test_init_publishes_and_reports_ready(node: Node) -> None:
    assert (node.driver_root / ".driver-container/manifest.json").is_file()
    assert (node.run_dir / "validations/.driver-daemons-status").read_text().strip() == "Ready"
    assert not (node.run_dir / "nvidia-driver.pid").exists(), "--no-wait must leave no pid file behind"
    assert (node.driver_root / f"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{V}").is_file()


def test_chrooted_nvidia_smi_reaches_the_driver_check(node: Node) -> None:
    done = run_nvidia(["chroot", str(node.driver_root), "/usr/bin/nvidia-smi"])
    assert done.returncode == 9, done.stdout + done.stderr
    assert MESSAGE in done.stdout


def test_validator_style_ld_preload_outside_the_chroot(node: Node) -> None:
    # gpu-operator's validator runs <driver root>/usr/bin/nvidia-smi with NVML preloaded from the root.
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(node.driver_root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")}
    done = run_nvidia([str(node.driver_root / "usr/bin/nvidia-smi")], env=env)
    assert done.returncode == 9, done.stdout + done.stderr
    assert MESSAGE in done.stdout


def test_status_json_on_the_published_host(node: Node) -> None:
    import json

    done = _cli(node, "status", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["findings"] == []
    assert report["nvidia"]["version"] == V and report["nvidia"]["flavour"] == "proprietary"
    assert report["userspace"]["version"] == V
    assert report["driver_root"]["published"] is True
    # The GSP files the loaded module names are found in the published root (docs/init.md).
    assert sorted(report["firmware"]) == [f"nvidia/{V}/gsp_ga10x.bin", f"nvidia/{V}/gsp_tu10x.bin"]
