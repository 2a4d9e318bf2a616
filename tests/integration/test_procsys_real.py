"""The published root is data (driverroot/procsys.py, docs/mps.md): real ``init --no-wait`` on a Talos-like /run in a
private mount namespace (tests/helpers/procsys.py), real Debian 535/550/555 userspaces with their busybox-static,
NVIDIA's DRA driver's exact MPS commands (tests/helpers/mps.py).

``init`` mounts a read-only sysfs and no procfs in the root. A consumer given it as a readOnly hostPath (a
recursive bind read-only at its top only) finds every mount in it read-only and an empty proc: no
/proc/sys/kernel/core_pattern to open for writing, no process listed. The DRA driver's chrooted MPS daemon
still starts from the root and its server loads libcuda.so.1 from it; 535's cuInit reaches the driver's
"no CUDA-capable device is detected", 550's and 555's fail with CUDA_ERROR_OPERATING_SYSTEM (they need a
writable procfs: driverroot/procsys.py has what was tried). The procfs earlier versions mounted there
hands that consumer /proc/sys for writing and every process (the probe is seen to catch it); a restart
unmounts it. With ``DRIVER_ROOT_PROCFS=mps-minimal`` (the opt-in for the DRA driver's MPS claims) ``init``
mounts a procfs ``subset=pid,hidepid=invisible`` there: the 550 and 555 servers reach the driver's
"no CUDA-capable device" again, while the consumer still finds no /proc/sys and a uid without capabilities
lists no process but its own; a restart keeps it, one without the setting unmounts it. Nothing stays
mounted on the machine.
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers.mps import NO_GPU
from helpers.procsys import mounts_below, run_node
from helpers.published_roots import GRAPHICS, userspace_root
from helpers.support import require

pytestmark = [pytest.mark.artefact, pytest.mark.timeout(600)]  # a publish and a flow

AMD64 = tuple(u for u in GRAPHICS if u.arch == "amd64")
NO_OS = "OS call failed or operation not supported on this OS"  # CUDA_ERROR_OPERATING_SYSTEM


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


def test_init_mounts_a_read_only_sysfs_and_no_procfs_in_its_tmpfs(node: tuple[str, dict[str, Any]]) -> None:
    _version, result = node
    assert result["init"]["rc"] == 0, result["init"]["log"]
    points = _points(result["mounts_init"])
    assert list(points) == ["", "nvidia/driver", "nvidia/driver/sys"], points
    assert points["nvidia/driver"]["source"] == "nvidia-driver-root"
    sys = points["nvidia/driver/sys"]
    assert (sys["fstype"], sys["source"]) == ("sysfs", "nvidia-driver-sys") and sys["options"].startswith("ro,")
    assert "mounted proc" not in result["init"]["log"]


def test_a_read_only_consumer_can_neither_write_proc_sys_nor_list_processes(node: tuple[str, dict[str, Any]]) -> None:
    _version, result = node
    view = result["consumer"]
    assert view["core_pattern"] == "ENOENT" and view["pids"] == view["foreign_pids"] == 0, view
    assert [m["options"].split(",")[0] for m in view["mounts"]] == ["ro", "ro"], view  # read-only all the way down


def test_the_dra_drivers_chrooted_daemon_starts_and_its_server_loads_libcuda(node: tuple[str, dict[str, Any]]) -> None:
    version, result = node
    flow = result["dra"]
    assert flow["branch"] == "chroot" and flow["start"]["rc"] == 0 and flow["client"]["rc"] == 0, flow
    error = NO_GPU if version.startswith("535.") else NO_OS  # 550, 555: no writable procfs (driverroot/procsys.py)
    assert f"Driver initialization failed with: {error}" in flow["server_log"], flow
    assert "cannot open shared object" not in flow["server_log"] + flow["control_log"], flow
    assert flow["left"] == [] and flow["shm_shared"], flow


def test_a_restart_unmounts_the_procfs_earlier_versions_mounted(node: tuple[str, dict[str, Any]]) -> None:
    _version, result = node
    assert sorted(_points(result["mounts_legacy"])) == ["", "nvidia/driver", "nvidia/driver/proc", "nvidia/driver/sys"]
    exposed = result["consumer_legacy"]  # what the consumer got from them: the probe catches it
    assert exposed["core_pattern"] == "opened for writing" and exposed["pids"] > 0, exposed
    assert exposed["foreign_pids"] > 0, exposed  # nobody lists root's processes there: the probe catches it
    assert result["restart"]["rc"] == 0, result["restart"]["log"]
    assert result["mounts_restart"] == result["mounts_init"]
    assert "the root is published without /proc" in result["restart"]["log"], result["restart"]["log"]


OPT_IN_PROC = ("proc", "nvidia-driver-proc-mps")


def test_the_opt_in_mounts_a_minimal_procfs_and_keeps_it_on_a_restart(node: tuple[str, dict[str, Any]]) -> None:
    _version, result = node
    assert result["optin"]["rc"] == 0, result["optin"]["log"]
    points = _points(result["mounts_optin"])
    assert list(points) == ["", "nvidia/driver", "nvidia/driver/sys", "nvidia/driver/proc"], points
    proc = points["nvidia/driver/proc"]
    assert (proc["fstype"], proc["source"]) == OPT_IN_PROC and proc["options"].startswith("rw,nosuid,nodev,noexec")
    assert {"hidepid=invisible", "subset=pid"} <= set(proc["super"].split(",")), proc
    assert result["optin_restart"]["rc"] == 0 and result["mounts_optin_restart"] == result["mounts_optin"]
    assert result["optout"]["rc"] == 0 and result["mounts_optout"] == result["mounts_init"]
    assert "the root is published without /proc" in result["optout"]["log"], result["optout"]["log"]


def test_with_the_opt_in_the_consumer_finds_no_proc_sys_and_no_foreign_process(
    node: tuple[str, dict[str, Any]],
) -> None:
    _version, result = node
    view = result["consumer_optin"]
    assert view["core_pattern"] == "ENOENT" and view["foreign_pids"] == 0, view
    assert view["pids"] > 0, view  # root (CAP_SYS_PTRACE) sees them: the listing is not empty by itself


def test_with_the_opt_in_the_dra_drivers_chrooted_server_reaches_the_driver(node: tuple[str, dict[str, Any]]) -> None:
    _version, result = node
    flow = result["dra_optin"]
    assert flow["branch"] == "chroot" and flow["start"]["rc"] == 0 and flow["client"]["rc"] == 0, flow
    assert f"Driver initialization failed with: {NO_GPU}" in flow["server_log"], flow
    assert flow["left"] == [], flow
