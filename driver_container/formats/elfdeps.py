"""What the dynamic loader needs from an ELF file: interpreter, DT_NEEDED, DT_SONAME.

Read from the program headers (PT_INTERP, PT_DYNAMIC) with pyelftools, not from section headers: the
loader itself only uses segments, and stripped or packed objects may have no section headers at all
(glibc elf/dl-load.c ``_dl_map_object_from_fd``, bminor/glibc @ 630da022).
pyelftools is imported inside the function so that status/probe commands stay fast.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

from driver_container.base.errors import ElfFormatError
from driver_container.formats.elffacts import ElfDeps

__all__ = ["ELF_MAGIC", "ElfDeps", "ElfFormatError", "parse_elf_deps"]

ELF_MAGIC = b"\x7fELF"


# Dynamic tags (elf.h). Parsed with ``struct`` rather than pyelftools' DynamicSegment: that class scans
# every section header to find .dynstr (~5 ms a library), while the loader itself only needs DT_STRTAB.
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
MAX_DYNAMIC = 1 << 20  # real PT_DYNAMIC segments are a few KiB
MAX_TABLE = 16 << 20  # program header table and .dynstr: real ones are KiB (libcuda's .dynstr ~100 KiB)
# Caps on what the dynamic array may ask to decode, so that the work is linear in the file whatever its
# offsets say (entries naming one long string decoded it once per entry). Measured on the 2901 ELF
# objects of the driver images in .cache/artefacts: at most 21 DT_NEEDED, 1 RUNPATH directory, strings
# of at most 39 bytes. ld.so has no caps; these are ~50x the real maxima.
MAX_NEEDED = 1024
MAX_SEARCH_DIRS = 64  # DT_RUNPATH and DT_RPATH directories together (Nix-built objects carry ~20)
MAX_STRING = 4096  # one name: PATH_MAX (linux/limits.h)
MAX_SEARCH_STRING = 64 << 10  # one DT_RUNPATH/DT_RPATH list: a few MAX_SEARCH_DIRS directories of ~1 KiB
MAX_DECODED = 1 << 20  # bytes of dynamic strings decoded in all (each distinct offset once)
_SEGMENT_TYPES = {1: "PT_LOAD", 2: "PT_DYNAMIC", 3: "PT_INTERP"}  # the only p_type values used here


@dataclass(frozen=True, slots=True)
class _Segment:
    kind: str
    offset: int
    vaddr: int
    filesz: int


@dataclass(frozen=True, slots=True)
class _Header:
    machine: str
    elf_class: int
    elf_type: str
    little_endian: bool
    stream: BinaryIO


@functools.cache
def _structs(little_endian: bool, elf_class: int) -> Any:
    """pyelftools' ELF header definition for one class and byte order, built once (``ELFFile`` rebuilds
    all its structures for every file: ~0.6 ms, and imports its section and DWARF machinery: ~20 ms)."""
    from elftools.elf.structs import ELFStructs  # lazy, hot path: `status` imports publish, never pyelftools

    structs = ELFStructs(little_endian=little_endian, elfclass=elf_class)
    structs.create_basic_structs()
    return structs


def _header_and_segments(stream: BinaryIO, source: str) -> tuple[_Header, list[_Segment]]:
    """The ELF header through pyelftools' structures (machine and type names), then the program headers
    with ``struct`` (parsing ~10 of them per file with construct cost more than the rest of the scan);
    no section header is read."""
    from elftools.common.utils import struct_parse  # lazy, hot path: `status` imports publish, never pyelftools

    ident = stream.read(6)
    if len(ident) < 6 or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise ElfFormatError(f"{source}: malformed ELF file: invalid identification (class/byte order)", path=source)
    little, elf_class = ident[5] == 1, 32 if ident[4] == 1 else 64
    ehdr = struct_parse(_structs(little, elf_class).Elf_Ehdr, stream, 0)
    found = []
    # p_type, p_offset, p_vaddr, p_filesz (Elf32_Phdr / Elf64_Phdr field order differs: gABI).
    layout = struct.Struct(("<" if little else ">") + ("IIIIIIII" if elf_class == 32 else "IIQQQQQQ"))
    if ehdr["e_phnum"] and ehdr["e_phentsize"] < layout.size:
        raise ElfFormatError(f"{source}: malformed ELF file: program header size {ehdr['e_phentsize']}", path=source)
    table = _read(stream, ehdr["e_phoff"], ehdr["e_phnum"] * ehdr["e_phentsize"], source)
    for index in range(ehdr["e_phnum"]):
        fields = layout.unpack_from(table, index * ehdr["e_phentsize"])
        if elf_class == 32:  # type, offset, vaddr, paddr, filesz, memsz, flags, align
            p_type, offset, vaddr, filesz = fields[0], fields[1], fields[2], fields[4]
        else:  # type, flags, offset, vaddr, paddr, filesz, memsz, align
            p_type, offset, vaddr, filesz = fields[0], fields[2], fields[3], fields[5]
        found.append(_Segment(_SEGMENT_TYPES.get(p_type, str(p_type)), offset, vaddr, filesz))
    header = _Header(str(ehdr["e_machine"]), elf_class, str(ehdr["e_type"]), little, stream)
    return header, found


def _read(stream: BinaryIO, offset: int, size: int, source: str) -> bytes:
    if size > MAX_TABLE or size < 0 or offset < 0:
        raise ElfFormatError(
            f"{source}: malformed ELF file: {size} bytes at offset {offset} is implausible",
            path=source,
        )
    stream.seek(offset)
    data = stream.read(size)
    if len(data) != size:
        raise ElfFormatError(
            f"{source}: malformed ELF file: {size} bytes at offset {offset} run past the end",
            path=source,
        )
    return data


def _dynamic_strings(elf: _Header, segments: list[_Segment], dynamic: _Segment, source: str) -> ElfStrings:
    entry = struct.Struct(("<" if elf.little_endian else ">") + ("qQ" if elf.elf_class == 64 else "iI"))
    raw = _read(elf.stream, dynamic.offset, min(dynamic.filesz, MAX_DYNAMIC), source)
    tags: list[tuple[int, int]] = []
    for tag, value in entry.iter_unpack(raw[: len(raw) - len(raw) % entry.size]):
        if tag == DT_NULL:
            break
        tags.append((tag, value))
    table = dict(tags)
    if DT_STRTAB not in table:
        return ElfStrings([], None, [])
    # DT_STRTAB is a virtual address: map it to a file offset through the PT_LOAD that contains it.
    load = next((s for s in segments if s.kind == "PT_LOAD" and s.vaddr <= table[DT_STRTAB] < s.vaddr + s.filesz), None)
    if load is None:
        raise ElfFormatError(f"{source}: DT_STRTAB {table[DT_STRTAB]:#x} is in no PT_LOAD segment", path=source)
    strtab = _read(elf.stream, table[DT_STRTAB] - load.vaddr + load.offset, table.get(DT_STRSZ, 0), source)
    needed_offsets = [v for t, v in tags if t == DT_NEEDED]
    if len(needed_offsets) > MAX_NEEDED:
        raise ElfFormatError(
            f"{source}: {len(needed_offsets)} DT_NEEDED entries, over the cap of {MAX_NEEDED}", path=source
        )
    strings = _DynamicStrings(strtab, source)
    needed = [strings.get(v) for v in needed_offsets]
    soname = strings.get(table[DT_SONAME]) if DT_SONAME in table else None
    paths = []
    for offset in (v for t, v in tags if t in (DT_RUNPATH, DT_RPATH)):
        paths += [p for p in strings.get(offset, MAX_SEARCH_STRING).split(":") if p]
        if len(paths) > MAX_SEARCH_DIRS:
            raise ElfFormatError(f"{source}: over {MAX_SEARCH_DIRS} DT_RUNPATH/DT_RPATH directories", path=source)
    return ElfStrings(needed, soname, paths)


class _DynamicStrings:
    """Strings of DT_STRTAB by offset, each decoded once, within MAX_STRING and MAX_DECODED bytes."""

    def __init__(self, strtab: bytes, source: str) -> None:
        self.strtab, self.source = strtab, source
        self.decoded: dict[int, str] = {}
        self.total = 0

    def get(self, offset: int, limit: int = MAX_STRING) -> str:
        text = self.decoded.get(offset)
        if text is not None and len(text) <= limit:
            return text
        end = self.strtab.find(b"\0", offset, offset + limit + 1)
        if offset >= len(self.strtab) or (end < 0 and offset + limit >= len(self.strtab)):
            raise ElfFormatError(
                f"{self.source}: dynamic string offset {offset} outside DT_STRSZ {len(self.strtab)}", path=self.source
            )
        if end < 0:
            raise ElfFormatError(
                f"{self.source}: dynamic string at offset {offset} is longer than {limit} bytes", path=self.source
            )
        self.total += end - offset
        if self.total > MAX_DECODED:
            raise ElfFormatError(f"{self.source}: dynamic strings decode to over {MAX_DECODED} bytes", path=self.source)
        text = self.decoded[offset] = self.strtab[offset:end].decode("utf-8", "surrogateescape")
        return text


@dataclass(frozen=True, slots=True)
class ElfStrings:
    needed: list[str]
    soname: str | None
    runpath: list[str]


def _interpreter(stream: BinaryIO, interp: _Segment, source: str) -> str:
    return _read(stream, interp.offset, min(interp.filesz, 4096), source).split(b"\0")[0].decode("utf-8", "replace")


def parse_elf_deps(stream: BinaryIO, source: str) -> ElfDeps:
    """The loader's view of the ELF file in ``stream`` (seekable); ``source`` names it in errors."""
    from elftools.common.exceptions import ELFError  # lazy, hot path: `status` imports publish, never pyelftools

    if stream.read(4) != ELF_MAGIC:
        raise ElfFormatError(
            f"{source}: not an ELF file (no \\x7fELF magic)",
            path=source,
            fix="remove the file or give it a name that is not a library name",
        )
    stream.seek(0)
    try:
        elf, segments = _header_and_segments(stream, source)
        interp = next((s for s in segments if s.kind == "PT_INTERP"), None)
        dynamic = next((s for s in segments if s.kind == "PT_DYNAMIC"), None)
        strings = _dynamic_strings(elf, segments, dynamic, source) if dynamic else ElfStrings([], None, [])
        return ElfDeps(
            machine=elf.machine,
            elf_class=elf.elf_class,
            elf_type=elf.elf_type,
            interpreter=_interpreter(stream, interp, source) if interp else None,
            soname=strings.soname,
            needed=tuple(strings.needed),
            runpath=tuple(strings.runpath),
        )
    except ElfFormatError:
        raise
    except (ELFError, Exception) as exc:  # pyelftools also lets construct/struct errors out on truncated files
        raise ElfFormatError(
            f"{source}: malformed ELF file: {exc}",
            path=source,
            fix="reinstall the package that owns it",
        ) from exc


def is_elf(head: bytes) -> bool:
    return head.startswith(ELF_MAGIC)
