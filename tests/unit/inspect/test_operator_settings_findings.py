"""gpu-operator settings on Talos (docs/operator.md, "Settings on Talos"): each one the operator's validator
would wait on forever is refused before Ready, naming the setting and the value to use; the module-parameter,
coherent-memory and firmware-path checks. The real validator and startup probe run in
tests/integration/test_operator_settings.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.support import FIXTURES, fixture_paths
from helpers.talos import talos_tree as _tree

from driver_container.findings import check
from driver_container.formats.kernel.pci import PciFunction
from driver_container.inspect.hoststate import HostState, inspect_host
from driver_container.settings import Settings

HOSTS = FIXTURES / "hosts"


def _load(tree: Path, *modules: str) -> None:
    """Add ``modules`` to the fixture's /proc/modules, as Talos's machine config would have loaded them."""
    with (tree / "proc/modules").open("a") as f:
        for name in modules:
            f.write(f"{name} 65536 0 - Live 0x0000000000000000 (O)\n")


def _codes(state: HostState, severity: str) -> set[str]:
    return {f.code for f in check(state) if f.severity == severity}


@pytest.mark.parametrize(
    ("settings", "code", "module", "setting"),
    [
        (Settings(gds_enabled=True), "GDS_MODULE_NOT_LOADED", "nvidia_fs", "gds.enabled"),
        (Settings(gdrcopy_enabled=True), "GDRCOPY_MODULE_NOT_LOADED", "gdrdrv", "gdrcopy.enabled"),
    ],
)
def test_gds_and_gdrcopy_without_their_module_are_refused_on_talos(
    tmp_path: Path, settings: Settings, code: str, module: str, setting: str
) -> None:
    tree = _tree(tmp_path, "v1.14.0-rc.1")
    state = inspect_host(fixture_paths(tree), settings)
    refusal = next(f for f in check(state) if f.code == code)
    assert refusal.severity == "error" and f"{setting}=true" in refusal.message and module in refusal.message
    assert f"{setting}=false" in refusal.fix and f"name: {module}" in refusal.fix  # the 1.14 document
    _load(tree, module)
    assert code not in _codes(inspect_host(fixture_paths(tree), settings), "error")


def test_gds_on_talos_1_13_says_there_is_no_nvidia_fs(tmp_path: Path) -> None:
    state = inspect_host(fixture_paths(_tree(tmp_path)), Settings(gds_enabled=True))
    refusal = next(f for f in check(state) if f.code == "GDS_MODULE_NOT_LOADED")
    assert (
        refusal.fix
        == "set gds.enabled=false (NVIDIADriver: spec.gds.enabled=false): Talos v1.13.9 ships no nvidia-fs.ko"
    )


def test_companion_settings_are_not_refused_on_generic_hosts(tmp_path: Path) -> None:
    """There NVIDIA's sidecars build and load nvidia_fs / gdrdrv after init: nothing to refuse."""
    settings = Settings(gds_enabled=True, gdrcopy_enabled=True, driver_platform="generic")
    state = inspect_host(fixture_paths(_tree(tmp_path)), settings)
    assert not {"GDS_MODULE_NOT_LOADED", "GDRCOPY_MODULE_NOT_LOADED"} & {f.code for f in check(state)}


@pytest.mark.parametrize(("scenario", "talos"), [("talos-1.13-unknown-parameter", True), ("ubuntu-24.04-dkms", False)])
def test_unknown_parameter_is_a_warning_on_talos_and_an_error_elsewhere(
    tmp_path: Path, scenario: str, talos: bool
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(HOSTS / scenario, tree, symlinks=True)
    if not talos:
        (tree / "drivers").mkdir(exist_ok=True)
        (tree / "drivers/nvidia.conf").write_text("NVreg_NoSuchParameter=1\n")
    found = [f for f in check(inspect_host(fixture_paths(tree), Settings())) if f.code == "UNKNOWN_PARAMETER"]
    assert found, "the fixture must request a parameter the module lacks"
    assert {f.severity for f in found} == ({"warning"} if talos else {"error"})
    assert all(("never applied" in f.message) is talos for f in found)


def _grace(state: HostState, device: int, mode: str | None) -> HostState:
    gpu = PciFunction(address="0009:01:00.0", vendor=0x10DE, device=device, pci_class=0x030200, driver="nvidia")
    nvidia = state.modules["nvidia"]
    params = dict(nvidia.parameters)
    params.pop("NVreg_CoherentGPUMemoryMode", None)
    if mode is not None:
        params["NVreg_CoherentGPUMemoryMode"] = mode
    modules = {**state.modules, "nvidia": nvidia._replace(parameters=params)}
    return state._replace(pci_gpus=(gpu,), modules=modules)


@pytest.mark.parametrize(
    ("device", "mode", "warned"),
    [
        (0x2342, '""', True),  # GH200, parameter unset: /proc/driver/nvidia/params prints ""
        (0x2941, '"numa"', True),  # GB200
        (0x2941, '"driver"', False),
        (0x2E12, '""', False),  # GB10: no memory of its own to online
        (0x2901, '""', False),  # B200 on PCIe/HGX: not coherent
        (0x2342, None, False),  # a driver without the parameter (before R580)
    ],
)
def test_coherent_memory_on_grace_needs_the_driver_mode(
    tmp_path: Path, device: int, mode: str | None, warned: bool
) -> None:
    state = _grace(inspect_host(fixture_paths(_tree(tmp_path)), Settings()), device, mode)
    found = [f for f in check(state) if f.code == "COHERENT_MEMORY_NOT_DRIVER"]
    assert bool(found) is warned
    if warned:
        assert found[0].severity == "warning"
        assert "- NVreg_CoherentGPUMemoryMode=driver" in found[0].fix and "name: nvidia" in found[0].fix


def test_firmware_only_in_the_published_root_without_a_search_path_is_reported(tmp_path: Path) -> None:
    """status used to say "findings: none" while the kernel could not reach the root's GSP firmware."""
    tree = _tree(tmp_path)
    paths = fixture_paths(tree)._replace(driver_root_override=tmp_path / "driver")
    state = inspect_host(paths, Settings())
    names = sorted(state.firmware)
    assert names, "the fixture's module names GSP firmware"
    for name in names:
        target = tmp_path / "driver/lib/firmware" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"gsp")
    param = tree / "sys/module/firmware_class/parameters/path"
    param.parent.mkdir(parents=True, exist_ok=True)
    param.write_text("\n")
    found = [f for f in check(inspect_host(paths, Settings())) if f.code == "FIRMWARE_PATH_UNSET"]
    assert len(found) == 1 and "is ''" in found[0].message and "firmware_class.path=" in found[0].fix
    param.write_text(f"{tmp_path / 'driver/lib/firmware'}\n")  # HOST_DRIVER_ROOT defaults to DRIVER_ROOT
    assert "FIRMWARE_PATH_UNSET" not in {f.code for f in check(inspect_host(paths, Settings()))}
