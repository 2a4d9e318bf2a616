"""Which flavour drives which GPU: the findings on the fixture hosts built from real PCI ids (their READMEs
name the hosts and sources), and on states derived from them where no whole tree is needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.support import FIXTURES, fixture_paths

from driver_container.findings import Finding, check
from driver_container.formats.kernel.pci import PciFunction
from driver_container.inspect.hoststate import HostState, inspect_host
from driver_container.settings import Settings

HOSTS = FIXTURES / "hosts"
B200 = tuple(PciFunction(f"0000:{bus}:00.0", 0x10DE, 0x2901, 0x030200, "nvidia") for bus in ("18", "2a"))
GB10 = PciFunction("000f:01:00.0", 0x10DE, 0x2E12, 0x030000, "nvidia")
P40 = PciFunction("0000:3b:00.0", 0x10DE, 0x1B38, 0x030200, None)


def _state(tree: str, tmp_path: Path, **settings: str) -> HostState:
    env = dict(line.split("=", 1) for line in (HOSTS / tree / "env").read_text().splitlines() if "=" in line)
    values = {"kernel_module_type": env.get("KERNEL_MODULE_TYPE", "auto"), "driver_version": "595.91.07"}
    paths = fixture_paths(HOSTS / tree, run=tmp_path / "run")
    return inspect_host(paths, Settings(**(values | settings)))  # type: ignore[arg-type]


def _gpu_findings(state: HostState) -> list[Finding]:
    codes = ("DRIVER_DROPPED_GPU", "FLAVOUR_CANNOT_DRIVE_GPU", "DRIVER_TOO_OLD_FOR_GPU")
    return [f for f in check(state) if f.code in codes]


def _at_580(state: HostState) -> HostState:
    """``state`` with the LTS driver of Talos 1.13 loaded (580.178.04), the last branch of pre-Turing GPUs."""
    return state._replace(nvidia_version=state.nvidia_version._replace(version="580.178.04"))  # type: ignore[union-attr]


def test_open_modules_of_580_with_only_a_pascal_gpu_is_an_error(tmp_path: Path) -> None:
    found = check(_at_580(_state("talos-1.13-tesla-p40-open", tmp_path)))
    (gpu,) = [f for f in found if f.code == "FLAVOUR_CANNOT_DRIVE_GPU"]
    assert gpu.severity == "error"
    assert "open (580.178.04)" in gpu.message and "10de:1b38 (Pascal) at 0000:3b:00.0" in gpu.message
    assert "rm_is_supported_device" in gpu.message  # the rule's source
    # Only the LTS tier still drives a Pascal GPU: the production one (595 on Talos 1.13) does not.
    assert gpu.fix.startswith("install the nonfree-kmod-nvidia-lts extension instead of")
    assert "production" not in gpu.fix
    assert "NO_GPUS" not in {f.code for f in found}  # the GPU finding says why nothing is bound


def test_a_595_driver_refuses_a_node_of_only_a_pascal_gpu(tmp_path: Path) -> None:
    (gpu,) = _gpu_findings(_state("talos-1.13-tesla-p40-open", tmp_path))
    assert (gpu.code, gpu.severity) == ("DRIVER_DROPPED_GPU", "error")
    assert (
        "595.91.07" in gpu.message
        and "10de:1b38 (Pascal) at 0000:3b:00.0: last driven by the 580 branch" in gpu.message
    )
    assert "the Release 580 series will be the last" in gpu.message
    assert gpu.fix.startswith("install the nonfree-kmod-nvidia-lts extension")


def test_a_mixed_node_keeps_its_turing_and_later_gpus_and_warns(tmp_path: Path) -> None:
    (gpu,) = _gpu_findings(_at_580(_state("talos-1.13-l4-v100-open", tmp_path)))
    assert gpu.severity == "warning" and "1 of the 2 NVIDIA GPU(s)" in gpu.message
    assert "10de:1db4 (Volta)" in gpu.message and "27b8" not in gpu.message
    assert gpu.fix.endswith("; set KERNEL_MODULE_TYPE=proprietary (driver.kernelModuleType in the ClusterPolicy)")


def test_a_595_driver_on_a_mixed_node_warns_of_the_volta_gpu(tmp_path: Path) -> None:
    (gpu,) = _gpu_findings(_state("talos-1.13-l4-v100-open", tmp_path))
    assert (gpu.code, gpu.severity) == ("DRIVER_DROPPED_GPU", "warning")
    assert "1 of the 2 NVIDIA GPU(s)" in gpu.message and "10de:1db4 (Volta) at 0000:81:00.0" in gpu.message


def test_proprietary_modules_on_blackwell_is_an_error(tmp_path: Path) -> None:
    (gpu,) = _gpu_findings(_state("talos-1.13-b200-proprietary", tmp_path))
    assert gpu.severity == "error" and "cannot drive 8 of the 8" in gpu.message
    assert "10de:2901 (Blackwell) at 0000:18:00.0, 0000:2a:00.0, 0000:3a:00.0, 0000:5d:00.0 and 4 more" in gpu.message
    assert "No devices were found" in gpu.message
    assert "install the nvidia-open-gpu-kernel-modules-production or -lts extension" in gpu.fix
    assert "KERNEL_MODULE_TYPE" not in gpu.fix  # auto: nothing to change there


def test_h100_with_either_flavour_is_fine(tmp_path: Path) -> None:
    state = _state("talos-1.13-h100-proprietary", tmp_path)
    assert [g.pci_id for g in state.pci_gpus] == ["10de:2331"] and _gpu_findings(state) == []
    opened = state._replace(nvidia_version=state.nvidia_version._replace(flavour="open"))  # type: ignore[union-attr]
    assert _gpu_findings(opened) == []


def test_flavour_mismatch_is_folded_into_the_gpu_finding(tmp_path: Path) -> None:
    # KERNEL_MODULE_TYPE=open, proprietary loaded: one finding (the GPU one), not FLAVOUR_MISMATCH beside it.
    found = check(_state("talos-1.13-b200-proprietary", tmp_path, kernel_module_type="open"))
    codes = [f.code for f in found]
    assert "FLAVOUR_CANNOT_DRIVE_GPU" in codes and "FLAVOUR_MISMATCH" not in codes
    # KERNEL_MODULE_TYPE=proprietary, as loaded: the GPU finding's fix changes it too.
    found = check(_state("talos-1.13-b200-proprietary", tmp_path, kernel_module_type="proprietary"))
    gpu = next(f for f in found if f.code == "FLAVOUR_CANNOT_DRIVE_GPU")
    assert gpu.fix.endswith("; set KERNEL_MODULE_TYPE=open (driver.kernelModuleType in the ClusterPolicy)")


def test_flavour_mismatch_never_asks_for_modules_that_cannot_drive_the_gpus(tmp_path: Path) -> None:
    # The open modules drive the B200s; KERNEL_MODULE_TYPE=proprietary must not be "fixed" by installing them.
    state = _state("talos-1.13-open-595", tmp_path, kernel_module_type="proprietary")._replace(pci_gpus=B200)
    (mismatch,) = [f for f in check(state) if f.code == "FLAVOUR_MISMATCH"]
    assert mismatch.fix.startswith("set KERNEL_MODULE_TYPE=open") and "nonfree" not in mismatch.fix
    assert _gpu_findings(state) == []


def test_gb10_needs_the_open_modules(tmp_path: Path) -> None:
    state = _state("talos-1.13-h100-proprietary", tmp_path)._replace(pci_gpus=(GB10,))
    (gpu,) = _gpu_findings(state)
    assert gpu.severity == "error" and "10de:2e12 (Blackwell) at 000f:01:00.0" in gpu.message
    assert _gpu_findings(_state("talos-1.13-open-595", tmp_path)._replace(pci_gpus=(GB10,))) == []


def test_a_535_driver_cannot_drive_blackwell_in_either_flavour(tmp_path: Path) -> None:
    state = _state("talos-1.11-kmod-535", tmp_path, driver_version="535.309.01")._replace(pci_gpus=B200)
    (gpu,) = _gpu_findings(state)
    assert (gpu.code, gpu.severity) == ("DRIVER_TOO_OLD_FOR_GPU", "error")
    assert "535.309.01" in gpu.message and "570" in gpu.fix and "nvidia-open-gpu-kernel-modules" in gpu.fix


def test_pascal_and_blackwell_on_one_node_have_no_common_flavour(tmp_path: Path) -> None:
    state = _state("talos-1.13-open-595", tmp_path)._replace(pci_gpus=(P40, *B200))
    (gpu,) = _gpu_findings(_at_580(state))
    assert gpu.severity == "warning" and gpu.fix.startswith("no one flavour drives every GPU of this node")
    (gpu,) = _gpu_findings(state)  # 595: the P40 is dropped, and its LTS driver's flavour cannot drive a B200
    assert gpu.code == "DRIVER_DROPPED_GPU" and gpu.severity == "warning"
    assert gpu.fix.startswith("no one flavour drives every GPU of this node") and "nonfree" not in gpu.fix


def test_unknown_ids_give_nothing(tmp_path: Path) -> None:
    future = PciFunction("0000:01:00.0", 0x10DE, 0x3FFF, 0x030200, None)
    assert _gpu_findings(_state("talos-1.13-b200-proprietary", tmp_path)._replace(pci_gpus=(future,))) == []


@pytest.mark.parametrize(
    ("gpus", "extension"),
    [((P40,), "nonfree-kmod-nvidia-lts"), (B200, "nvidia-open-gpu-kernel-modules-production or -lts")],
)
def test_not_loaded_names_the_extension_the_gpus_need(
    tmp_path: Path, gpus: tuple[PciFunction, ...], extension: str
) -> None:
    state = _state("talos-1.13-open-595", tmp_path)
    nvidia = state.modules["nvidia"]._replace(loaded=False)
    state = state._replace(modules={**state.modules, "nvidia": nvidia}, nvidia_version=None, pci_gpus=gpus)
    (missing,) = [f for f in check(state) if f.code == "NVIDIA_NOT_LOADED"]
    assert f"({extension}: " in missing.fix
    assert _gpu_findings(state) == []
