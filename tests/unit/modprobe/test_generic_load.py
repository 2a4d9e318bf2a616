"""load_modules on fixture hosts with fake modprobe/modinfo: exact argv, parameters, RDMA, verification."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from helpers.fakes import FakeHost

from driver_container.base.errors import ModuleLoadError, UsageError, VerificationError
from driver_container.base.problems import Problem
from driver_container.inspect.hoststate import LoadedModule, read_loaded_modules
from driver_container.modprobe.generic import build_modprobe_argv, confirm_loaded, load_modules, mellanox_present
from driver_container.settings import Settings

Make = Callable[..., FakeHost]
NVIDIA_PARAMS = [
    "NVreg_EnableGpuFirmware=1",
    "NVreg_OpenRmEnableUnsupportedGpus=1",
    "NVreg_RegistryDwords=RMUseSwI2c=0x01;RMI2cSpeed=100",
]


def test_build_argv_adds_coherent_mode_from_r580() -> None:
    assert build_modprobe_argv("nvidia", [("A", "1")], "580.65.06") == [
        "modprobe",
        "nvidia",
        "A=1",
        "NVreg_CoherentGPUMemoryMode=driver",
    ]
    assert build_modprobe_argv("nvidia", [("A", "1")], "570.195.03") == ["modprobe", "nvidia", "A=1"]
    assert build_modprobe_argv("nvidia", [], None) == ["modprobe", "nvidia"]


def test_build_argv_keeps_operator_coherent_mode_and_other_modules_untouched() -> None:
    given = [("NVreg_CoherentGPUMemoryMode", "cdmm")]
    assert build_modprobe_argv("nvidia", given, "595.91.07") == [
        "modprobe",
        "nvidia",
        "NVreg_CoherentGPUMemoryMode=cdmm",
    ]
    assert build_modprobe_argv("nvidia-uvm", [("x", "1")], "595.91.07") == ["modprobe", "nvidia-uvm", "x=1"]


def test_build_argv_rejects_garbage_version() -> None:
    with pytest.raises(UsageError, match="'595'"):
        build_modprobe_argv("nvidia", [], "595")


def test_load_from_image_tree_exact_argv(fake_host: Make) -> None:
    host = fake_host("ubuntu-unloaded")
    report = load_modules(host.paths, Settings(), host.runner)
    image = str(host.paths.userspace_root)
    assert host.calls() == [
        ["modinfo", "-b", image, "-F", "version", "nvidia"],
        ["modprobe", "-d", image, "nvidia", *NVIDIA_PARAMS, "NVreg_CoherentGPUMemoryMode=driver"],
        ["modprobe", "-d", image, "nvidia-uvm", "uvm_perf_prefetch_enable=0"],
        ["modprobe", "-d", image, "nvidia-modeset"],
    ]
    assert report.driver_version == "580.105.08"
    assert report.loaded == ("nvidia", "nvidia_uvm", "nvidia_modeset")
    assert report.warnings == ()
    assert "GPU_DIRECT_RDMA_ENABLED is off" in report.peermem
    assert report.firmware_path == "set"
    firmware = host.root / "sys/module/firmware_class/parameters/path"
    assert firmware.read_text() == str(host.paths.host_driver_root / "lib/firmware")
    state = read_loaded_modules(host.paths).modules
    assert state["nvidia"].refcnt == 2 and set(state["nvidia"].holders) == {"nvidia_uvm", "nvidia_modeset"}
    assert state["nvidia"].parameters["NVreg_CoherentGPUMemoryMode"] == "driver"
    assert not state["nvidia_drm"].loaded and not state["nvidia_peermem"].loaded


def test_settings_version_skips_modinfo_and_pre_r580_has_no_coherent_mode(fake_host: Make) -> None:
    host = fake_host("ubuntu-unloaded", version="570.195.03")
    load_modules(host.paths, Settings(driver_version="570.195.03", nvidia_modeset=False), host.runner)
    image = str(host.paths.userspace_root)
    assert host.calls() == [
        ["modprobe", "-d", image, "nvidia", *NVIDIA_PARAMS],
        ["modprobe", "-d", image, "nvidia-uvm", "uvm_perf_prefetch_enable=0"],
    ]


def test_unknown_version_loads_without_coherent_mode_and_warns(fake_host: Make) -> None:
    host = fake_host("ubuntu-unloaded", version="")
    report = load_modules(host.paths, Settings(nvidia_modeset=False), host.runner)
    assert host.calls()[1][-1] == NVIDIA_PARAMS[-1]
    assert report.driver_version is None
    assert any(w.path == "nvidia" and "version unknown" in w.message for w in report.warnings)


@pytest.mark.parametrize(
    ("scenario", "rdma", "peermem"),
    [
        ("ubuntu-mellanox-unloaded", True, True),
        ("ubuntu-mellanox-unloaded", False, False),
        ("ubuntu-unloaded", True, False),
        ("ubuntu-unloaded", False, False),
    ],
)
def test_peermem_only_with_rdma_and_mellanox(fake_host: Make, scenario: str, rdma: bool, peermem: bool) -> None:
    host = fake_host(scenario)
    report = load_modules(host.paths, Settings(gpu_direct_rdma=rdma), host.runner)
    modules = [c[3] for c in host.calls() if c[0] == "modprobe"]
    assert modules == ["nvidia", "nvidia-uvm", "nvidia-modeset", *(["nvidia-peermem"] if peermem else [])]
    assert ("nvidia_peermem" in report.loaded) is peermem
    assert read_loaded_modules(host.paths).modules["nvidia_peermem"].loaded is peermem
    if rdma and not peermem:
        assert "no Mellanox PCI device (vendor 0x15b3)" in report.peermem


def test_mellanox_detection_reads_pci_vendor(fake_host: Make) -> None:
    assert mellanox_present(fake_host("ubuntu-mellanox-unloaded").paths.sys)
    assert not mellanox_present(fake_host("ubuntu-unloaded").paths.sys)


def test_host_module_tree_when_image_has_none(fake_host: Make) -> None:
    host = fake_host("ubuntu-mellanox-unloaded")
    load_modules(host.paths, Settings(driver_version="580.105.08", gpu_direct_rdma=True), host.runner)
    assert {c[2] for c in host.calls()} == {str(host.paths.host_root)}
    assert host.calls()[-1] == ["modprobe", "-d", str(host.paths.host_root), "nvidia-peermem"]


def test_no_module_tree_anywhere_is_a_clear_error(fake_host: Make) -> None:
    host = fake_host("ubuntu-mellanox-unloaded")
    (host.root / "host/usr/lib/modules/6.8.0-51-generic/modules.dep").unlink()
    with pytest.raises(ModuleLoadError, match=r"no module tree for kernel 6\.8\.0-51-generic") as info:
        load_modules(host.paths, Settings(), host.runner)
    assert info.value.fix and "6.8.0-51-generic" in info.value.fix
    assert host.calls() == []


def test_modprobe_failure_stops_and_names_command(fake_host: Make) -> None:
    host = fake_host("ubuntu-unloaded")
    host.fail("nvidia_uvm")
    with pytest.raises(ModuleLoadError, match=r"modprobe -d .* nvidia-uvm uvm_perf_prefetch_enable=0 exited 1") as info:
        load_modules(host.paths, Settings(driver_version="580.105.08"), host.runner)
    assert info.value.argv[0] == "modprobe" and info.value.argv[-2:] == ("nvidia-uvm", "uvm_perf_prefetch_enable=0")
    assert info.value.returncode == 1
    assert [c[3] for c in host.calls()] == ["nvidia", "nvidia-uvm"]  # modeset never tried


def test_already_loaded_modules_are_not_reloaded(fake_host: Make) -> None:
    host = fake_host("ubuntu-loaded-idle")
    report = load_modules(host.paths, Settings(driver_version="580.105.08"), host.runner)
    assert host.calls() == []
    assert report.already_loaded == ("nvidia", "nvidia_uvm", "nvidia_modeset")
    assert Problem("nvidia", "already loaded: parameters from nvidia.conf not applied") in report.warnings


def test_version_mismatch_after_load_is_an_error(fake_host: Make) -> None:
    host = fake_host("ubuntu-unloaded", version="575.64.05")  # the tree holds another version than claimed
    with pytest.raises(VerificationError, match=r"do not have version 580\.105\.08: nvidia 575\.64\.05") as info:
        load_modules(host.paths, Settings(driver_version="580.105.08"), host.runner)
    assert (info.value.loaded_version, info.value.file_version) == ("575.64.05", "580.105.08")


def _module(name: str, parameters: dict[str, str]) -> LoadedModule:
    return LoadedModule(name, True, False, "580.105.08", None, 0, (), None, parameters)


def test_verification_compares_effective_parameters() -> None:
    after = {
        "nvidia": _module(
            "nvidia",
            {"NVreg_EnableGpuFirmware": "1", "NVreg_RegistryDwords": '"a=1"', "NVreg_CoherentGPUMemoryMode": '"cdmm"'},
        )
    }
    requested = {
        "nvidia": [
            ("NVreg_EnableGpuFirmware", "0x01"),
            ("NVreg_RegistryDwords", "a=1"),
            ("NVreg_CoherentGPUMemoryMode", "driver"),
            ("NVreg_NotReported", "1"),
        ]
    }
    warnings = confirm_loaded(after, ["nvidia"], "580.105.08", requested)
    assert warnings == (Problem("nvidia", "NVreg_CoherentGPUMemoryMode requested 'driver', in effect '\"cdmm\"'"),)
    assert str(warnings[0]) == "nvidia: NVreg_CoherentGPUMemoryMode requested 'driver', in effect '\"cdmm\"'"


def test_module_parameters_reach_sysfs_through_the_fake(fake_host: Make) -> None:
    host = fake_host("ubuntu-unloaded")
    (host.paths.drivers_conf_dir / "nvidia-modeset.conf").write_text("hdmi_deepcolor=1\n")
    report = load_modules(host.paths, Settings(), host.runner)
    assert report.warnings == ()
    assert host.calls()[-1][-1] == "hdmi_deepcolor=1"
    assert report.modules["nvidia_modeset"].parameters == {"hdmi_deepcolor": "1"}
