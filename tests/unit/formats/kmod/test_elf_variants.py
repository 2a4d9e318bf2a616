"""ELF32/ELF64 in both byte orders (Debian i386 = ELF32 LSB, s390x = ELF64 MSB), checked against kmod
and pyelftools on tiny generated module-like files."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from helpers.elfbuild import build_elf

from driver_container.formats.kmod import format_modinfo
from driver_container.formats.kmod.elf import read_sections
from driver_container.readers.kmod import read_module

MODINFO = (
    b"\0\0version=2.0\0license=Dual MIT/GPL\0\0\0firmware=a.bin\0firmware=b.bin\0"
    b"parmtype=b:charp\0parm=a:the a\0parmtype=a:int\0parm=b:the b\0noequals\0vermagic=6.1.0 SMP \0"
)
VARIANTS = [(32, "<"), (32, ">"), (64, "<"), (64, ">")]


@pytest.mark.parametrize(("bits", "order"), VARIANTS)
def test_variant_reads(bits: int, order: str) -> None:
    data = build_elf(MODINFO, bits=bits, order=order, this_module_name=b"tiny")
    sections = read_sections(data, "tiny.ko")
    assert (sections.elfclass, sections.little_endian) == (bits, order == "<")
    info = read_module(data, filename="/x/tiny.ko")
    assert info.name == "tiny"
    assert info.get_all("firmware") == ["a.bin", "b.bin"]
    assert info.get("noequals") == ""
    assert [p.name for p in info.parameters.values()] == ["a", "b"]  # reverse of first appearance (b, a)


@pytest.mark.parametrize(("bits", "order"), VARIANTS)
def test_variant_agrees_with_pyelftools(bits: int, order: str) -> None:
    from elftools.elf.elffile import ELFFile

    data = build_elf(MODINFO, bits=bits, order=order)
    elf = ELFFile(io.BytesIO(data))
    assert elf.elfclass == bits and elf.little_endian == (order == "<")
    assert read_sections(data, "t").modinfo == elf.get_section_by_name(".modinfo").data()


@pytest.mark.parametrize(("bits", "order"), VARIANTS)
def test_variant_output_equals_kmod(kmod_modinfo, tmp_path: Path, bits: int, order: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / f"tiny{bits}{order == '<'}.ko"
    path.write_bytes(build_elf(MODINFO, bits=bits, order=order))
    expected = kmod_modinfo(path)
    assert b"parm:           b:the b (charp)" in expected
    assert format_modinfo(read_module(path)) == expected
    assert format_modinfo(read_module(path), field="parm") == kmod_modinfo("-F", "parm", path)


def test_long_keys_pad_like_printf(kmod_modinfo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # "%-*s" with a negative width pads by its absolute value: a 20-char key gets 5 spaces.
    path = tmp_path / "long.ko"
    path.write_bytes(build_elf(b"a_very_long_key_name=v\0fifteen_chars_k=z\0", bits=64, order="<"))
    expected = kmod_modinfo(path)
    assert b"a_very_long_key_name:     v\n" in expected
    assert format_modinfo(read_module(path)) == expected
