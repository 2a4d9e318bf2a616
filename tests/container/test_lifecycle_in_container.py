"""The Debian-535 image on a simulated Talos 1.11 node with the proprietary kmod extension 535.309.01
(tests/fixtures/hosts/talos-1.11-kmod-535): the image's own userspace matches the loaded modules, as on a
real node. Covers what the kubelet does to the driver container: wait for it, probe it, stop it, and start
another one by mistake on the same /run/nvidia.
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from container_support import IMAGE_DRIVER_VERSION, FixtureNode, detached, fixture_node, run_to_end, wait_for_log
from helpers.support import FIXTURES, require

# Containers start in seconds, but a cold engine or image pull can take minutes: 10 minutes per test.
pytestmark = [pytest.mark.container, pytest.mark.timeout(600)]

HOST = FIXTURES / "hosts" / "talos-1.11-kmod-535"
READY_LINE = "Done, now waiting for signal"
NO_DRIVER = "couldn't communicate with the NVIDIA driver"

# gpu-operator's startup probe (NVIDIA/gpu-operator assets/state-driver/0400_configmap.yaml @ 10ee5b36),
# rewritten for the fixture paths:
# /sys/module/nvidia/refcnt comes from SYSFS_ROOT. Its nvidia-smi step needs a GPU; PROBE_NO_GPU_OK=1
# accepts exit 9 (libraries loaded, no kernel driver answered) so the steps after it run too.
STARTUP_PROBE = r"""
set -u
[ -f /fixture/sys/module/nvidia/refcnt ] || { echo "probe: nvidia module not loaded"; exit 1; }
status=/run/nvidia/validations/.driver-daemons-status
if [ -f "$status" ] && [ "$(cat "$status")" != Ready ]; then echo "probe: daemons not ready"; exit 1; fi
nvidia-smi; rc=$?
echo "probe: nvidia-smi exit $rc"
[ "$rc" -eq 0 ] || { [ "$rc" -eq 9 ] && [ "${PROBE_NO_GPU_OK:-}" = 1 ]; } || exit 2
mkdir -p /run/nvidia/validations
tmp=/run/nvidia/validations/.driver-ctr-ready.tmp
printf 'GDRCOPY_ENABLED: false\nGDS_ENABLED: false\nGPU_DIRECT_RDMA_ENABLED: false\n' >"$tmp"
mv "$tmp" /run/nvidia/validations/.driver-ctr-ready
rm -f "$tmp"
echo "probe: ready"
"""


def _env(node: FixtureNode) -> dict[str, str]:
    # No GPU here: a persistence daemon would die at once and fail the container (docs/init.md).
    return node.container_env() | {"NVIDIA_PERSISTENCED": "false"}


@pytest.fixture
def node(image: Any, tmp_path: Path) -> FixtureNode:
    return fixture_node(HOST, tmp_path)


@pytest.fixture
def waiting(image: Any, node: FixtureNode) -> Iterator[Any]:
    """`init` (waiting mode) that has published and reported ready."""
    with detached(image, ["init"], env=_env(node), volumes=node.volumes()) as container:
        wait_for_log(container, READY_LINE, timeout=90)
        yield container


def test_waiting_init_holds_the_pid_file_and_publishes(waiting: Any, node: FixtureNode) -> None:
    assert (node.run_dir / "nvidia-driver.pid").is_file()
    assert (node.run_dir / "validations/.driver-daemons-status").read_text().strip() == "Ready"
    assert (node.driver_root / f"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{IMAGE_DRIVER_VERSION}").is_file()


def test_docker_stop_exits_0_quickly_and_removes_the_pid_file(waiting: Any, node: FixtureNode) -> None:
    started = time.monotonic()
    waiting.stop(timeout=10)  # SIGTERM, then SIGKILL after 10 s: a slow exit would show as > 5 s and 137
    elapsed = time.monotonic() - started
    waiting.reload()
    assert waiting.attrs["State"]["ExitCode"] == 0, waiting.logs().decode(errors="replace")
    assert elapsed < 5, f"docker stop took {elapsed:.1f} s"
    assert not (node.run_dir / "nvidia-driver.pid").exists()


def test_second_container_on_the_same_run_dir_does_not_start_init(image: Any, waiting: Any, node: FixtureNode) -> None:
    second = run_to_end(image, ["init"], env=_env(node), volumes=node.volumes(), timeout=60)
    assert second.exit_code == 1, second.stdout + second.stderr
    assert "already running" in second.stdout + second.stderr
    assert READY_LINE not in second.stdout + second.stderr
    waiting.reload()
    assert waiting.status == "running", "the first init must survive the second one"
    assert (node.run_dir / "nvidia-driver.pid").is_file()


def test_startup_probe_passes_up_to_gpu_access(waiting: Any, node: FixtureNode) -> None:
    strict = waiting.exec_run(["sh", "-c", STARTUP_PROBE])
    out = strict.output.decode(errors="replace")
    assert strict.exit_code == 2, out  # every check before nvidia-smi's GPU access passed
    assert NO_DRIVER in out and "probe: nvidia-smi exit 9" in out
    assert not (node.run_dir / "validations/.driver-ctr-ready").exists()

    tolerant = waiting.exec_run(["sh", "-c", STARTUP_PROBE], environment={"PROBE_NO_GPU_OK": "1"})
    assert tolerant.exit_code == 0, tolerant.output.decode(errors="replace")
    ready = (node.run_dir / "validations/.driver-ctr-ready").read_text().splitlines()
    assert ready == ["GDRCOPY_ENABLED: false", "GDS_ENABLED: false", "GPU_DIRECT_RDMA_ENABLED: false"]


def test_probe_fails_while_daemons_are_not_ready(waiting: Any, node: FixtureNode) -> None:
    # The probe must not pass when the status file says otherwise: this is what makes it a real check.
    (node.run_dir / "validations/.driver-daemons-status").write_text("NotReady\n")
    done = waiting.exec_run(["sh", "-c", STARTUP_PROBE], environment={"PROBE_NO_GPU_OK": "1"})
    assert done.exit_code == 1, done.output.decode(errors="replace")
    assert "daemons not ready" in done.output.decode(errors="replace")


def test_host_chroot_runs_the_published_nvidia_smi(image: Any, node: FixtureNode) -> None:
    require(os.geteuid() == 0, "root (chroot)")
    done = run_to_end(image, ["init", "--no-wait"], env=_env(node), volumes=node.volumes())
    assert done.exit_code == 0, done.stdout + done.stderr
    smi = subprocess.run(
        ["chroot", str(node.driver_root), "/usr/bin/nvidia-smi"], capture_output=True, text=True, check=False
    )
    assert smi.returncode == 9, smi.stdout + smi.stderr  # 127 would mean a library is missing
    assert NO_DRIVER in smi.stdout


# Expected from the fixture's proc/devices (nvidia 195, nvidia-uvm 509) and its one GPU (Device Minor 0).
EXPECTED_NODES = {
    "nvidiactl": (195, 255),
    "nvidia-modeset": (195, 254),
    "nvidia-uvm": (509, 0),
    "nvidia-uvm-tools": (509, 1),
    "nvidia0": (195, 0),
    "null": (1, 3),  # with the root's shell (node/devices.py chroot_nodes)
}


def test_privileged_init_creates_real_device_nodes(image: Any, node: FixtureNode, privileged_allowed: bool) -> None:
    # gpu-operator runs the driver container privileged. An engine that cannot (it lacks capabilities
    # itself) still grants CAP_MKNOD, the one capability mknod(2) needs: the nodes are just as real.
    privileges: dict[str, Any] = {"privileged": True} if privileged_allowed else {"cap_add": ["MKNOD"]}
    done = run_to_end(image, ["init", "--no-wait"], env=_env(node), volumes=node.volumes(), **privileges)
    assert done.exit_code == 0, done.stdout + done.stderr
    dev = node.driver_root / "dev"
    found = {}
    # The image ships a static busybox, so the root has bin/sh: an empty dev/shm directory for the DRA
    # driver's MPS shm mount and dev/null for its chrooted daemon come with it (docs/operator.md "MPS").
    assert (node.driver_root / "bin/sh").is_file()
    assert stat.S_ISDIR((dev / "shm").lstat().st_mode) and not any((dev / "shm").iterdir())
    for name in sorted(p.name for p in dev.iterdir() if p.name != "shm"):
        st = (dev / name).lstat()
        assert stat.S_ISCHR(st.st_mode), f"{dev / name}: not a character device"
        assert stat.S_IMODE(st.st_mode) == 0o666, f"{dev / name}: mode {stat.S_IMODE(st.st_mode):o}"
        found[name] = (os.major(st.st_rdev), os.minor(st.st_rdev))
    assert found == EXPECTED_NODES
