"""Pure parsers of /proc/modules, /proc/driver/nvidia/* and the operator's parameter files."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver_container.base.errors import HostReadError
from driver_container.formats.kernel.modules import ProcModule, parse_proc_modules
from driver_container.formats.kernel.nvidia_proc import (
    gpu_from_information,
    parse_gpu_information,
    parse_nvidia_params,
    parse_nvidia_version,
)
from driver_container.formats.modconf import parse_module_conf as parse_parameter_conf


def test_proc_modules_shapes_and_rejects() -> None:
    text = (
        "nvidia 56623104 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)\n"
        "nvidia_uvm 2134016 0 - Loading 0xffffffffc0a00000 (O)\n"
        "ext4 1000 1 [permanent], Live 0x0\n"
        "nounload 4096 - - Live 0x0\n"
        "this is not a module line\n"
        "bad 12 1 - Dead 0x0\n"
        "\n"
    )
    rejects: list[str] = []
    mods = parse_proc_modules(text, rejects=rejects)
    assert mods[0] == ProcModule("nvidia", 56623104, 2, ("nvidia_uvm", "nvidia_modeset"), "Live", "POE")
    assert (mods[1].state, mods[1].taint) == ("Loading", "O")
    assert mods[2].users == ("[permanent]",)
    assert (mods[3].refcnt, mods[3].users) == (None, ())
    assert rejects == ["this is not a module line", "bad 12 1 - Dead 0x0"]


@given(st.text(max_size=300))
def test_proc_modules_never_raises(text: str) -> None:
    for module in parse_proc_modules(text):
        assert module.name and module.size >= 0


OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Thu Jan 23 23:54:30 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n"
)
PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.309.01  Wed Mar 25 15:26:15 UTC 2026\nGCC version:  \n"
)


def test_nvidia_version_both_formats() -> None:
    open_ = parse_nvidia_version(OPEN)
    assert (open_.version, open_.flavour, open_.arch) == ("570.86.15", "open", "x86_64")
    assert open_.gcc_version == "gcc version 12.2.0 (Debian 12.2.0-14)"
    prop = parse_nvidia_version(PROPRIETARY)
    assert (prop.version, prop.flavour, prop.arch, prop.gcc_version) == ("535.309.01", "proprietary", "x86_64", None)


def test_nvidia_version_two_parts_empty_date_aarch64() -> None:
    v = parse_nvidia_version("NVRM version: NVIDIA UNIX aarch64 Kernel Module  515.76  \n")
    assert (v.version, v.flavour, v.arch, v.build) == ("515.76", "proprietary", "aarch64", "")


@pytest.mark.parametrize("text", ["", "garbage\n", "NVRM version: something else 1.2.3\n", "\x00\xff"])
def test_nvidia_version_unrecognised_is_a_clear_error(text: str) -> None:
    with pytest.raises(HostReadError, match="no 'NVRM version"):
        parse_nvidia_version(text)


def test_params_and_gpu_information() -> None:
    assert parse_nvidia_params('EnableGpuFirmware: 18\nRegistryDwords: ""\nnot a param line\nOdd Key: 1\n') == {
        "EnableGpuFirmware": "18",
        "RegistryDwords": '""',
    }
    info = parse_gpu_information("Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-1\nDevice Minor: \t 3\njunk\n")
    gpu = gpu_from_information("0000:41:00.0", info)
    assert (gpu.model, gpu.uuid, gpu.device_minor) == ("NVIDIA H100 80GB HBM3", "GPU-1", 3)
    assert gpu_from_information("0000:41:00.0", {"Device Minor": "x"}).device_minor is None


def test_parameter_conf() -> None:
    text = '# comment\nNVreg_A=1 NVreg_B="x y"\n\nNVreg_RegistryDwords="RMFoo=1;RMBar=2"\n'
    assert parse_parameter_conf(text) == [
        ("NVreg_A", "1"),
        ("NVreg_B", "x y"),
        ("NVreg_RegistryDwords", "RMFoo=1;RMBar=2"),
    ]
    with pytest.raises(HostReadError, match=r"nvidia.conf:2: 'oops' is not NAME=VALUE"):
        parse_parameter_conf("A=1\noops\n", source="nvidia.conf")
    with pytest.raises(HostReadError, match=r"nvidia\.conf:1: cannot parse"):
        parse_parameter_conf('A="unterminated\n', source="nvidia.conf")
