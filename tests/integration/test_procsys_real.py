"""``init`` mounts a procfs and a sysfs in the root it published, and NVIDIA's DRA driver's chrooted MPS daemon then
reaches the GPU check (docs/mps.md): real ``init --no-wait`` on a Talos-like /run in a private mount
namespace (tests/helpers/procsys.py), real Debian 535/550/555 userspaces with their busybox-static, the DRA
driver's exact commands (tests/helpers/mps.py).

With init's mounts the server loads libcuda.so.1 from the root and cuInit ends at the driver's "no
CUDA-capable device is detected" for all three. With proc and sys unmounted again (init's step undone),
550's and 555's cuInit fails with CUDA_ERROR_OPERATING_SYSTEM; 535's reaches the same no-GPU error
without them (its libcuda tolerates their absence where no GPU is there: the flow cannot tell, so for 535
only the mounts themselves are checked). A restart mounts nothing more; one after they were removed
mounts them back. Nothing stays mounted on the machine.
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers.mps import NO_GPU
from helpers.procsys import mounts_below, run_node
from helpers.published_roots import GRAPHICS, userspace_root
from helpers.support import require

pytestmark = [pytest.mark.artefact, pytest.mark.timeout(600)]  # a publish and two flows

AMD64 = tuple(u for u in GRAPHICS if u.arch == "amd64")
NO_OS = "OS call failed or operation not supported on this OS"  # CUDA_ERROR_OPERATING_SYSTEM
PROC = {"fstype": "proc", "source": "nvidia-driver-proc"}
SYS = {"fstype": "sysfs", "source": "nvidia-driver-sys"}


@pytest.fixture(scope="module", params=AMD64, ids=[u.name for u in AMD64])
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    base = tmp_path_factory.mktemp(f"procsys-{request.param.name}")
    source = userspace_root(request.param, base)
    require(
        (source / "usr/bin/busybox").is_file(),
        f"busybox-static in {source}",
        how="scripts/make-nvidia-debs-userspace.sh (layout 3) through scripts/setup.sh",
    )
    result = run_node(request.param.name, base)
    assert mounts_below(base) == [], "a mount of the node's namespace is left on the machine"
    return request.param.version, result


def _points(mounts: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """By mount point relative to the node's /run ("" for itself)."""
    return {m["point"].partition("/run")[2].lstrip("/"): m for m in mounts}


def _reached_the_gpu_check(flow: dict[str, Any], error: str) -> None:
    assert flow["branch"] == "chroot" and flow["start"]["rc"] == 0 and flow["client"]["rc"] == 0, flow
    assert f"Driver initialization failed with: {error}" in flow["server_log"], flow
    assert "cannot open shared object" not in flow["server_log"] + flow["control_log"], flow
    assert flow["left"] == [], flow


def test_init_mounts_proc_and_sys_in_its_tmpfs(node: tuple[str, dict[str, Any]]) -> None:
    _version, result = node
    assert result["init"]["rc"] == 0, result["init"]["log"]
    points = _points(result["mounts_init"])
    assert list(points) == ["", "nvidia/driver", "nvidia/driver/proc", "nvidia/driver/sys"], points
    assert points["nvidia/driver"]["source"] == "nvidia-driver-root"
    proc, sys = points["nvidia/driver/proc"], points["nvidia/driver/sys"]
    assert {k: proc[k] for k in PROC} == PROC and {k: sys[k] for k in SYS} == SYS
    assert proc["options"].startswith("rw,nosuid,nodev,noexec") and sys["options"].startswith("ro,nosuid,nodev,noexec")
    assert "mounted proc nvidia-driver-proc at" in result["init"]["log"]


def test_the_dra_drivers_chrooted_daemon_reaches_the_no_gpu_error(node: tuple[str, dict[str, Any]]) -> None:
    _version, result = node
    _reached_the_gpu_check(result["dra"], NO_GPU)
    assert result["dra"]["shm_shared"], result["dra"]["probe"]


def test_a_restart_mounts_nothing_more(node: tuple[str, dict[str, Any]]) -> None:
    _version, result = node
    assert result["restart"]["rc"] == 0, result["restart"]["log"]
    assert result["mounts_restart"] == result["mounts_init"]
    assert "mounted proc" not in result["restart"]["log"] and "mounted sysfs" not in result["restart"]["log"]


def test_without_init_s_mounts_550_and_later_fail_and_a_restart_puts_them_back(
    node: tuple[str, dict[str, Any]],
) -> None:
    version, result = node
    assert list(_points(result["mounts_without"])) == ["", "nvidia/driver"]  # the step undone
    _reached_the_gpu_check(result["dra_without"], NO_GPU if version.startswith("535.") else NO_OS)
    assert result["repair"]["rc"] == 0, result["repair"]["log"]
    assert result["mounts_repair"] == result["mounts_init"]
