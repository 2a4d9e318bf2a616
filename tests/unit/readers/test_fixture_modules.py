"""The committed kbuild fixtures (tests/fixtures/modules) read like kmod reads them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from helpers.support import MODULES

from driver_container.formats.kmod import ModuleParameter, format_modinfo
from driver_container.readers.kmod import read_module

FORMS = {"nvidia.ko": None, "nvidia.ko.xz": "xz", "nvidia.ko.zst": "zstd"}


@pytest.mark.parametrize(("name", "compression"), FORMS.items())
def test_fixture_values(name: str, compression: str | None) -> None:
    info = read_module(MODULES / name)
    assert info.filename == str(MODULES / name)
    assert info.compression == compression
    assert info.name == "nvidia"
    assert info.version == "595.91.07"
    assert info.license == "Dual MIT/GPL"
    assert info.firmware == ["nvidia/595.91.07/gsp_tu10x.bin", "nvidia/595.91.07/gsp_ga10x.bin"]
    assert info.vermagic is not None and info.vermagic.endswith(" ")
    assert info.srcversion is not None and len(info.srcversion) == 23
    assert info.get("depends") == ""
    assert info.parameters == {
        "NVreg_EnableGpuFirmware": ModuleParameter(
            "NVreg_EnableGpuFirmware", "fixture parameter NVreg_EnableGpuFirmware", "int"
        ),
        "NVreg_RegistryDwords": ModuleParameter(
            "NVreg_RegistryDwords", "fixture parameter NVreg_RegistryDwords", "charp"
        ),
    }
    assert list(info.parameters) == ["NVreg_EnableGpuFirmware", "NVreg_RegistryDwords"]
    sig = info.signature
    assert sig is not None
    assert (sig.sig_id, sig.signer, sig.sig_hashalgo, sig.id_type) == (
        "PKCS#7",
        "Fixture throw-away signing key",
        "sha512",
        2,
    )
    assert len(sig.signature) == 256  # RSA-2048
    assert 1 <= len(sig.sig_key) <= 20


def test_forms_are_the_same_module() -> None:
    infos = [read_module(MODULES / name) for name in FORMS]
    assert {(i.fields, i.signature) for i in infos} == {(infos[0].fields, infos[0].signature)}


def test_bytes_source_and_filename() -> None:
    data = (MODULES / "nvidia.ko.xz").read_bytes()
    assert read_module(data).filename is None
    assert read_module(data, filename="x.ko.xz").filename == "x.ko.xz"
    assert read_module(data).fields == read_module(MODULES / "nvidia.ko").fields


@pytest.mark.parametrize("name", FORMS)
@pytest.mark.parametrize(
    "args",
    [
        (),
        ("-F", "parm"),
        ("-F", "signer"),
        ("-F", "firmware"),
        ("-F", "filename"),
        ("-F", "sig_key"),
        ("-F", "signature"),
        ("-F", "nosuchfield"),
        ("-0",),
        ("-0", "-F", "parm"),
    ],
)
def test_text_output_equals_kmod(kmod_modinfo, name: str, args: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    path = MODULES / name
    field = args[args.index("-F") + 1] if "-F" in args else None
    ours = format_modinfo(read_module(path), field=field, null="-0" in args)
    assert ours == kmod_modinfo(*args, path)


def test_section_lookup_agrees_with_pyelftools() -> None:
    # elf.py decodes the section table itself for speed; pyelftools is the independent reference.
    from elftools.elf.elffile import ELFFile

    from driver_container.formats.kmod.elf import read_sections

    data = (MODULES / "nvidia.ko").read_bytes()
    elf = ELFFile(io.BytesIO(data))
    section = elf.get_section_by_name(".modinfo")
    this_module = elf.get_section_by_name(".gnu.linkonce.this_module").data()
    ours = read_sections(data, "nvidia.ko")
    assert ours.modinfo == section.data()
    assert ours.this_module_name == this_module[24:].split(b"\0")[0] == b"nvidia"
    assert (ours.elfclass, ours.little_endian) == (64, True)


def test_name_falls_back_to_this_module_section(tmp_path: Path) -> None:
    from helpers.elfbuild import build_elf

    data = build_elf(b"license=GPL\0", bits=64, order="<", this_module_name=b"nvidia_drm")
    assert read_module(data).name == "nvidia_drm"


def test_large_file_is_mapped_and_reads_the_same(kmod_modinfo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from helpers.elfbuild import build_elf

    from driver_container.readers.kmod import MMAP_THRESHOLD

    data = build_elf(b"description=" + b"x" * MMAP_THRESHOLD + b"\0license=GPL\0", bits=64, order="<")
    path = tmp_path / "large.ko"
    path.write_bytes(data)
    info = read_module(path)
    assert info == read_module(data, filename=str(path))
    assert format_modinfo(info) == kmod_modinfo(path)


def test_fifo_is_read_without_a_size(tmp_path: Path) -> None:
    import os
    import threading

    fifo = tmp_path / "pipe.ko"
    os.mkfifo(fifo)
    payload = (MODULES / "nvidia.ko.zst").read_bytes()
    writer = threading.Thread(target=fifo.write_bytes, args=(payload,))
    writer.start()
    info = read_module(fifo)
    writer.join()
    assert (info.compression, info.version) == ("zstd", "595.91.07")
