"""MPS from the published driver root (docs/mps.md): NVIDIA's DRA driver and the device plugin's MPS mode
start their control daemon from real published roots 535/550/555 (tests/helpers/mps.py has each consumer's
commands, environment and mounts, with their sources).

The graphics userspaces carry their suite's busybox-static (scripts/make-nvidia-debs-userspace.sh), as the
image does (Dockerfile), so ``init --no-wait`` publishes bin/sh, dev/shm and dev/null. The daemon starts, a
client request makes it start nvidia-cuda-mps-server, which loads libcuda.so.1 from the root (never a loader
error) and logs what cuInit returned, and ``quit`` leaves no process behind. The device plugin's daemon
reaches the driver's no-GPU error. The roots here are published into a temporary directory, not init's own
tmpfs, so init mounts no /sys in them (and a root never gets a /proc, driverroot/procsys.py): the DRA
driver's chrooted daemon gets 535's "no CUDA-capable device", and 550's and 555's
CUDA_ERROR_OPERATING_SYSTEM (their libcuda needs a writable /proc); tests/integration/test_procsys_real.py
runs the same flow on a root in init's own tmpfs, with the same outcome. Each piece the DRA driver needs
is then removed from a hard-linked copy of the root, and its flow fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers.mps import NO_GPU, run_flow
from helpers.published_roots import GRAPHICS, Published, publish_with_init, userspace_root
from helpers.support import require
from helpers.toolkit import management_spec

pytestmark = pytest.mark.artefact

AMD64 = tuple(u for u in GRAPHICS if u.arch == "amd64")
LOADER_ERRORS = ("cannot open shared object", "error while loading", "libcuda.so")
NO_OS = "OS call failed or operation not supported on this OS"  # CUDA_ERROR_OPERATING_SYSTEM


@pytest.fixture(scope="module", params=AMD64, ids=[u.name for u in AMD64])
def mps_root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Published:
    base = tmp_path_factory.mktemp(f"mps-{request.param.name}")
    source = userspace_root(request.param, base)
    require(
        (source / "usr/bin/busybox").is_file(),
        f"busybox-static in {source}",
        how="scripts/make-nvidia-debs-userspace.sh (layout 3) through scripts/setup.sh",
    )
    return publish_with_init(request.param, base)


def _server_reached_the_gpu_check(result: dict[str, Any], error: str = NO_GPU) -> None:
    assert result["start"]["rc"] == 0, result["start"]
    assert result["client"]["rc"] == 0, result["client"]
    assert f"Driver initialization failed with: {error}" in result["server_log"], result
    assert not any(text in result["server_log"] + result["control_log"] for text in LOADER_ERRORS), result
    # The daemon takes ``quit`` (and answers it with exit status 1 once a server has failed, as here) and is gone.
    assert "Cmd:quit" in result["control_log"], result["quit"]
    assert result["left"] == [], result


def test_dra_driver_runs_its_daemon_chrooted_in_the_root(mps_root: Published, tmp_path: Path) -> None:
    result = run_flow("dra", mps_root.driver_root, tmp_path)
    assert result["branch"] == "chroot"  # the root's bin/sh is executable
    # libcuda is loaded and initialised; without init's /proc in the root, 550+ fail there (module docstring).
    _server_reached_the_gpu_check(result, NO_GPU if int(mps_root.userspace.version.split(".")[0]) < 550 else NO_OS)
    assert "Starting control daemon using socket /tmp/nvidia-mps/control" in result["control_log"]
    assert result["shm_shared"], result["probe"]  # the daemon's /dev/shm is the claim's shm directory


def test_device_plugin_daemon_finds_what_the_management_spec_mounts(mps_root: Published, tmp_path: Path) -> None:
    root = mps_root.driver_root
    spec, _ = management_spec(root, root)
    edits = [d["containerEdits"] for d in spec["devices"]] + [spec.get("containerEdits", {})]
    mounts = {m["containerPath"]: m["hostPath"] for e in edits for m in e.get("mounts", [])}
    libcuda = f"/usr/lib/{mps_root.userspace.triplet}/libcuda.so.{mps_root.userspace.version}"
    for path in ("/usr/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-server", libcuda):
        assert mounts[path] == f"{root}{path}"  # at the root's own path: the overlay of the root stands in
    result = run_flow("plugin", root, tmp_path)
    _server_reached_the_gpu_check(result)
    assert "Starting control daemon using socket /mps/nvidia.com/gpu/pipe/control" in result["control_log"]
    assert result["threads"]["rc"] == 0 and result["healthy"]["out"].strip() == "50.0", result


def _copy_without(root: Path, piece: str, dest: Path) -> Path:
    """A hard-linked copy of the published root (device nodes and all) without ``piece`` ("": all of it)."""
    subprocess.run(["cp", "-a", "--link", str(root), str(dest)], check=True, timeout=120)
    if not piece:
        return dest
    target = dest / piece
    assert target.exists() or target.is_symlink(), target
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    else:
        target.unlink()
    return dest


@pytest.mark.parametrize("piece", ["bin/sh", "dev/shm", "dev/null"])
def test_dra_driver_fails_without_each_piece_the_root_publishes_for_it(
    mps_root: Published, tmp_path: Path, piece: str
) -> None:
    result = run_flow("dra", _copy_without(mps_root.driver_root, piece, tmp_path / "root"), tmp_path / "work")
    with pytest.raises(AssertionError):
        _server_reached_the_gpu_check(result)
        assert result["branch"] == "chroot" and result["shm_shared"]
    assert result["left"] == [], result  # whatever failed, nothing is left running
    expected = {  # how each one fails (docs/mps.md)
        "bin/sh": result["branch"] == "direct" and NO_GPU not in result["server_log"],
        "dev/shm": result["branch"] == "chroot" and not result["shm_shared"],
        "dev/null": result["start"]["rc"] != 0,
    }
    assert expected[piece], result


def test_device_plugin_fails_without_the_mps_server(mps_root: Published, tmp_path: Path) -> None:
    root = _copy_without(mps_root.driver_root, "usr/bin/nvidia-cuda-mps-server", tmp_path / "root")
    result = run_flow("plugin", root, tmp_path / "work")
    assert result["start"]["rc"] == 0 and NO_GPU not in result["server_log"], result
    assert result["left"] == [], result


def test_published_pieces_are_what_the_consumers_check(mps_root: Published) -> None:
    root = mps_root.driver_root
    assert os.access(root / "bin/sh", os.X_OK) and not (root / "bin/sh").is_symlink()
    for directory in ("dev/shm", "proc", "sys"):  # mount points: the claim's shm; init's sysfs; proc stays empty
        assert (root / directory).is_dir() and not any((root / directory).iterdir())
    null = (root / "dev/null").lstat()
    assert (os.major(null.st_rdev), os.minor(null.st_rdev)) == (1, 3)
