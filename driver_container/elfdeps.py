"""What the dynamic loader needs from an ELF file: interpreter, DT_NEEDED, DT_SONAME.

Read from the program headers (PT_INTERP, PT_DYNAMIC) with pyelftools, not from section headers: the
loader itself only uses segments, and stripped or packed objects may have no section headers at all
(formats.md). pyelftools is imported inside the function so that status/probe commands stay fast.
"""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from driver_container.errors import UserspaceError

ELF_MAGIC = b"\x7fELF"


class ElfFormatError(UserspaceError):
    """A file expected to be an ELF executable or shared object is not one, or is malformed."""


@dataclass(frozen=True)
class ElfDeps:
    machine: str  # pyelftools e_machine name, e.g. "EM_X86_64", "EM_AARCH64"
    elf_class: int  # 32 or 64
    elf_type: str  # "ET_DYN" or "ET_EXEC"
    interpreter: str | None  # PT_INTERP, e.g. "/lib64/ld-linux-x86-64.so.2"; None for static binaries
    soname: str | None
    needed: tuple[str, ...]
    runpath: tuple[str, ...] = ()

    @property
    def is_static(self) -> bool:
        return self.interpreter is None


# Dynamic tags (elf.h). Parsed with ``struct`` rather than pyelftools' DynamicSegment: that class scans
# every section header to find .dynstr (~5 ms a library), while the loader itself only needs DT_STRTAB.
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
MAX_DYNAMIC = 1 << 20  # real PT_DYNAMIC segments are a few KiB


@dataclass(frozen=True)
class _Segment:
    kind: str
    offset: int
    vaddr: int
    filesz: int


def _segments(elf: Any) -> list[_Segment]:
    """Program headers through pyelftools' own structure definitions (no section header is read)."""
    from elftools.common.utils import struct_parse

    found = []
    for index in range(elf.num_segments()):
        header = struct_parse(elf.structs.Elf_Phdr, elf.stream, elf["e_phoff"] + index * elf["e_phentsize"])
        found.append(_Segment(str(header["p_type"]), header["p_offset"], header["p_vaddr"], header["p_filesz"]))
    return found


def _read(stream: BinaryIO, offset: int, size: int, source: str) -> bytes:
    stream.seek(offset)
    data = stream.read(size)
    if len(data) != size:
        raise ElfFormatError(f"{source}: segment at {offset} runs past the end of the file")
    return data


def _dynamic_strings(elf: Any, segments: list[_Segment], dynamic: _Segment, source: str) -> ElfStrings:
    entry = struct.Struct(("<" if elf.little_endian else ">") + ("qQ" if elf.elfclass == 64 else "iI"))
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
    load = next(
        (s for s in segments if s.kind == "PT_LOAD" and s.vaddr <= table[DT_STRTAB] < s.vaddr + s.filesz), None
    )
    if load is None:
        raise ElfFormatError(f"{source}: DT_STRTAB {table[DT_STRTAB]:#x} is in no PT_LOAD segment")
    strtab = _read(elf.stream, table[DT_STRTAB] - load.vaddr + load.offset, table.get(DT_STRSZ, 0), source)

    def string(offset: int) -> str:
        end = strtab.find(b"\0", offset)
        if offset >= len(strtab) or end < 0:
            raise ElfFormatError(f"{source}: dynamic string offset {offset} outside DT_STRSZ {len(strtab)}")
        return strtab[offset:end].decode("utf-8", "surrogateescape")

    needed = [string(v) for t, v in tags if t == DT_NEEDED]
    soname = string(table[DT_SONAME]) if DT_SONAME in table else None
    paths = [p for t, v in tags if t in (DT_RUNPATH, DT_RPATH) for p in string(v).split(":") if p]
    return ElfStrings(needed, soname, paths)


@dataclass(frozen=True)
class ElfStrings:
    needed: list[str]
    soname: str | None
    runpath: list[str]


def _interpreter(stream: BinaryIO, interp: _Segment, source: str) -> str:
    return _read(stream, interp.offset, min(interp.filesz, 4096), source).split(b"\0")[0].decode("utf-8", "replace")


def _parse(stream: BinaryIO, source: str) -> ElfDeps:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    if stream.read(4) != ELF_MAGIC:
        raise ElfFormatError(
            f"{source}: not an ELF file (no \\x7fELF magic)",
            fix="remove the file or give it a name that is not a library name",
        )
    stream.seek(0)
    try:
        elf = ELFFile(stream)
        segments = _segments(elf)
        interp = next((s for s in segments if s.kind == "PT_INTERP"), None)
        dynamic = next((s for s in segments if s.kind == "PT_DYNAMIC"), None)
        strings = _dynamic_strings(elf, segments, dynamic, source) if dynamic else ElfStrings([], None, [])
        return ElfDeps(
            machine=str(elf["e_machine"]),
            elf_class=int(elf.elfclass),
            elf_type=str(elf["e_type"]),
            interpreter=_interpreter(stream, interp, source) if interp else None,
            soname=strings.soname,
            needed=tuple(strings.needed),
            runpath=tuple(strings.runpath),
        )
    except ElfFormatError:
        raise
    except (ELFError, Exception) as exc:  # pyelftools also lets construct/struct errors out on truncated files
        raise ElfFormatError(f"{source}: malformed ELF file: {exc}", fix="reinstall the package that owns it") from exc


def read_elf_deps(source: bytes | Path, *, name: str | None = None) -> ElfDeps:
    """Parse ``source`` (bytes, or a path opened without following a final symlink)."""
    if isinstance(source, bytes):
        return _parse(io.BytesIO(source), name or "<bytes>")
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        fix = f"check the permissions of {source}"
        raise ElfFormatError(f"{source}: cannot open: {exc.strerror}", fix=fix) from exc
    with os.fdopen(fd, "rb") as stream:
        return _parse(stream, name or str(source))


def is_elf(head: bytes) -> bool:
    return head.startswith(ELF_MAGIC)
