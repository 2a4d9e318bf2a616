"""The userspace's architecture against the node's, and the per-file flavour.

The fixtures' module files and libraries are real x86_64 ELF files; the aarch64 userspace is the same
tree with ``e_machine`` of libcuda rewritten to EM_AARCH64 (183), which is all the check reads.
"""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath

from helpers.support import FIXTURES, fixture_paths

from driver_container.findings import check
from driver_container.formats.elfarch import elf_machine, machine_name
from driver_container.inspect.hoststate import inspect_host
from driver_container.inspect.modfiles import ModuleFile, read_module_files, with_companion_flavours
from driver_container.settings import Settings

USERSPACE = FIXTURES / "userspace" / "debian-595.91.07"
SETTINGS = Settings(driver_version="595.91.07", kernel_module_type="open")
EM_AARCH64 = 183


def _codes(userspace: Path, tmp_path: Path) -> list[str]:
    paths = fixture_paths(FIXTURES / "hosts/talos-1.13-open-595", run=tmp_path / "run", userspace=userspace)
    state = inspect_host(paths, SETTINGS)
    return [f.code for f in check(state) if f.severity == "error"]


def _aarch64_userspace(tmp_path: Path) -> Path:
    image = tmp_path / "userspace"
    shutil.copytree(USERSPACE, image, symlinks=True)
    for lib in image.rglob("lib*.so.595.91.07"):
        if lib.is_file() and not lib.is_symlink():
            data = bytearray(lib.read_bytes())
            data[18:20] = EM_AARCH64.to_bytes(2, "little")
            lib.write_bytes(bytes(data))
    return image


def test_aarch64_userspace_on_an_x86_64_node_is_an_error(tmp_path: Path) -> None:
    assert "ARCH_MISMATCH" in _codes(_aarch64_userspace(tmp_path), tmp_path)


def test_matching_architectures_give_no_finding(tmp_path: Path) -> None:
    assert "ARCH_MISMATCH" not in _codes(USERSPACE, tmp_path)


def test_elf_machine_reads_both_byte_orders() -> None:
    little = b"\x7fELF\x02\x01\x01" + bytes(11) + (62).to_bytes(2, "little")
    big = b"\x7fELF\x02\x02\x01" + bytes(11) + (21).to_bytes(2, "big")
    assert (machine_name(elf_machine(little)), machine_name(elf_machine(big))) == ("x86_64", "ppc64le")
    assert elf_machine(b"\x7fELF") is None and elf_machine(b"MZ" + bytes(30)) is None


def test_proprietary_uvm_is_proprietary_although_its_license_is_dual_mit_gpl() -> None:
    """talos-1.11-kmod-535 holds NVIDIA's proprietary build: nvidia.ko "NVIDIA", nvidia-uvm "Dual MIT/GPL"."""
    paths = fixture_paths(FIXTURES / "hosts/talos-1.11-kmod-535")
    files = read_module_files(paths.host, "6.12.43-talos")
    assert files["nvidia_uvm"].license == "Dual MIT/GPL"
    assert (files["nvidia"].flavour, files["nvidia_uvm"].flavour) == ("proprietary", "proprietary")


def test_a_companion_of_another_build_keeps_an_unknown_flavour() -> None:
    core = ModuleFile(PurePosixPath("/m/extras/nvidia.ko"), "nvidia", version="1.2", license="NVIDIA")
    uvm_here = ModuleFile(PurePosixPath("/m/extras/nvidia-uvm.ko"), "nvidia_uvm", version="1.2", license="Dual MIT/GPL")
    uvm_elsewhere = ModuleFile(
        PurePosixPath("/m/updates/nvidia-drm.ko"), "nvidia_drm", version="1.2", license="Dual MIT/GPL"
    )
    flavours = {
        n: m.flavour
        for n, m in with_companion_flavours(
            {"nvidia": core, "nvidia_uvm": uvm_here, "nvidia_drm": uvm_elsewhere}
        ).items()
    }
    assert flavours == {"nvidia": "proprietary", "nvidia_uvm": "proprietary", "nvidia_drm": None}
    assert with_companion_flavours({"nvidia_uvm": uvm_here})["nvidia_uvm"].flavour is None
