"""GPUs NVIDIA moved to a legacy branch, on the 595 fixture host (tests/fixtures/hosts/talos-1.13-h100-proprietary)
with its H100 swapped for a V100 or a P100: from the fallback table (the R580 cut-off of Maxwell, Pascal and
Volta) and from the image's own supported-gpus.json (tests/fixtures/supported-gpus)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers.gpuswap import put_gpu_list, swap_h100
from helpers.support import FIXTURES, fixture_paths

from driver_container.findings import Finding, check
from driver_container.formats.kernel.pci import PciFunction
from driver_container.formats.supported_gpus import MAX_BYTES
from driver_container.inspect.hoststate import HostState, inspect_host
from driver_container.settings import Settings

H100_HOST = FIXTURES / "hosts/talos-1.13-h100-proprietary"
LIST_595 = FIXTURES / "supported-gpus/supported-gpus-595.json"
V100, P100, K80 = 0x1DB4, 0x15F8, 0x102D
GPU_CODES = ("DRIVER_DROPPED_GPU", "FLAVOUR_CANNOT_DRIVE_GPU", "DRIVER_TOO_OLD_FOR_GPU")


def _gpu(device: int, address: str = "0000:01:00.0") -> PciFunction:
    return PciFunction(address, 0x10DE, device, 0x030200, None)


def _state(tmp_path: Path, *, gpu_list: bytes | None = None, device: int | None = None) -> HostState:
    """The 595 proprietary host; with ``gpu_list`` as the image's supported-gpus.json at its default path;
    with ``device``, a copy whose H100 is that GPU (helpers/gpuswap.py)."""
    tree, userspace = H100_HOST, tmp_path / "userspace"
    if device is not None:
        tree = tmp_path / "host"
        shutil.copytree(H100_HOST, tree, symlinks=True)
        swap_h100(tree, device)
    if gpu_list is not None:
        put_gpu_list(userspace, gpu_list)
    paths = fixture_paths(tree, run=tmp_path / "run", userspace=userspace)
    return inspect_host(paths, Settings(driver_version="595.91.07"))


def _gpu_findings(state: HostState) -> list[Finding]:
    return [f for f in check(state) if f.code in GPU_CODES]


@pytest.mark.parametrize(("device", "label"), [(V100, "Volta"), (P100, "Pascal")])
def test_a_595_driver_refuses_a_node_whose_only_gpu_is_a_v100_or_p100(tmp_path: Path, device: int, label: str) -> None:
    state = _state(tmp_path, device=device)
    assert state.nvidia_version is not None and state.nvidia_version.version == "595.91.07"
    assert [g.pci_id for g in state.pci_gpus] == [f"10de:{device:04x}"] and state.gpus == ()
    (gpu,) = _gpu_findings(state)
    assert (gpu.code, gpu.severity) == ("DRIVER_DROPPED_GPU", "error")
    assert f"10de:{device:04x} ({label}) at 0000:01:00.0: last driven by the 580 branch" in gpu.message
    assert "595.91.07" in gpu.message and "No devices were found" in gpu.message
    assert "the Release 580 series will be the last to support" in gpu.message  # NVIDIA's notice, cited
    assert gpu.fix.startswith("install the nonfree-kmod-nvidia-lts extension (the LTS tier: the 580 branch")
    assert "instead of nonfree-kmod-nvidia-production" in gpu.fix


def test_the_h100_passes_and_a_580_driver_still_drives_the_v100(tmp_path: Path) -> None:
    state = _state(tmp_path)
    assert [g.pci_id for g in state.pci_gpus] == ["10de:2331"] and _gpu_findings(state) == []
    at_580 = state._replace(
        nvidia_version=state.nvidia_version._replace(version="580.178.04"),  # type: ignore[union-attr]
        pci_gpus=(_gpu(V100),),
    )
    assert _gpu_findings(at_580) == []


def test_a_v100_beside_an_h100_is_a_warning(tmp_path: Path) -> None:
    (gpu,) = _gpu_findings(_state(tmp_path)._replace(pci_gpus=(_gpu(0x2331), _gpu(V100, "0000:02:00.0"))))
    assert (gpu.code, gpu.severity) == ("DRIVER_DROPPED_GPU", "warning") and "1 of the 2" in gpu.message


def test_the_images_list_decides_where_it_lists_the_gpu(tmp_path: Path) -> None:
    # A Tesla K80 (Kepler): no row of the table, so without the list nothing is said of it.
    assert _gpu_findings(_state(tmp_path / "table", device=K80)) == []
    state = _state(tmp_path / "list", gpu_list=LIST_595.read_bytes(), device=K80)
    (gpu,) = _gpu_findings(state)
    assert (gpu.code, gpu.severity) == ("DRIVER_DROPPED_GPU", "error")
    assert "10de:102d (Tesla K80) at 0000:01:00.0: last driven by the 470 branch" in gpu.message
    assert "supported-gpus.json lists it with legacybranch 470.xx" in gpu.message
    assert gpu.fix.startswith("no Talos extension ships the 470 branch")


def test_the_list_names_the_v100_and_the_h100_passes_with_it(tmp_path: Path) -> None:
    state = _state(tmp_path, gpu_list=LIST_595.read_bytes())
    assert _gpu_findings(state) == [] and state.support_of(0x2331).source.endswith("supported-gpus.json")  # type: ignore[union-attr]
    (gpu,) = _gpu_findings(_state(tmp_path / "v100", gpu_list=LIST_595.read_bytes(), device=V100))
    assert "10de:1db4 (Volta, Tesla V100-PCIE-16GB) at 0000:01:00.0: last driven by the 580 branch" in gpu.message
    assert gpu.severity == "error" and "nonfree-kmod-nvidia-lts" in gpu.fix


def test_the_list_says_which_flavour(tmp_path: Path) -> None:
    # The table knows no proprietary answer for T4 (10de:1eb8); the list gives it gsp_proprietary_supported.
    assert _state(tmp_path / "table").support_of(0x1EB8).proprietary == "unknown"  # type: ignore[union-attr]
    state = _state(tmp_path / "list", gpu_list=LIST_595.read_bytes(), device=0x2342)  # GH200: kernelopen only
    (gpu,) = _gpu_findings(state)
    assert gpu.code == "FLAVOUR_CANNOT_DRIVE_GPU" and "lists 10de:2342 with 'kernelopen' only" in gpu.message


def test_a_damaged_list_is_a_problem_and_the_table_answers(tmp_path: Path) -> None:
    state = _state(tmp_path, gpu_list=b'{"chips": [{"devid": "V100"}]}', device=V100)
    assert state.listed_gpus is None
    assert any("not NVIDIA's supported-gpus.json" in p.message for p in state.problems)
    (gpu,) = _gpu_findings(state)
    assert gpu.code == "DRIVER_DROPPED_GPU" and "(Volta) at" in gpu.message


def test_the_list_is_not_read_without_nvidia_gpus(tmp_path: Path) -> None:
    tree = tmp_path / "host"
    shutil.copytree(H100_HOST, tree, symlinks=True)
    (tree / "sys/bus/pci/devices/0000:01:00.0").unlink()  # the H100 leaves the bus
    userspace = tmp_path / "userspace"
    target = put_gpu_list(userspace, b"")
    target.unlink()
    target.mkdir()  # a directory where the list belongs: reading it is a problem
    with_gpu = inspect_host(fixture_paths(H100_HOST, run=tmp_path / "run", userspace=userspace), Settings())
    assert [p for p in with_gpu.problems if "supported-gpus" in p.path]
    state = inspect_host(fixture_paths(tree, run=tmp_path / "run", userspace=userspace), Settings())
    assert state.pci_gpus == () and state.listed_gpus is None
    assert not [p for p in state.problems if "supported-gpus" in p.path]


@pytest.mark.parametrize("kind", ["fifo", "huge"])
def test_a_list_that_is_a_fifo_or_too_large_is_a_problem_never_a_hang(tmp_path: Path, kind: str) -> None:
    userspace = tmp_path / "userspace"
    target = put_gpu_list(userspace, b"")
    if kind == "fifo":
        target.unlink()
        os.mkfifo(target)  # an open that waited for a writer would hang every start
    else:
        target.write_bytes(b" " * (MAX_BYTES + 1))
    state = inspect_host(fixture_paths(H100_HOST, run=tmp_path / "run", userspace=userspace), Settings())
    assert state.listed_gpus is None and [p for p in state.problems if "supported-gpus" in p.path]
    assert state.support_of(0x2331) is not None  # the table answers
