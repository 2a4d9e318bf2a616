"""What the dynamic loader needs from an ELF file: interpreter, DT_NEEDED, DT_SONAME.

Read from the program headers (PT_INTERP, PT_DYNAMIC) with pyelftools, not from section headers: the
loader itself only uses segments, and stripped or packed objects may have no section headers at all
(formats.md). pyelftools is imported inside the function so that status/probe commands stay fast.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

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
        interp: str | None = None
        soname: str | None = None
        needed: list[str] = []
        runpath: list[str] = []
        for segment in elf.iter_segments():
            kind = segment["p_type"]
            if kind == "PT_INTERP":
                interp = segment.get_interp_name()  # type: ignore[attr-defined]
            elif kind == "PT_DYNAMIC":
                for tag in segment.iter_tags():  # type: ignore[attr-defined]
                    if tag.entry.d_tag == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif tag.entry.d_tag == "DT_SONAME":
                        soname = tag.soname
                    elif tag.entry.d_tag == "DT_RUNPATH":
                        runpath.extend(p for p in tag.runpath.split(":") if p)
                    elif tag.entry.d_tag == "DT_RPATH":
                        runpath.extend(p for p in tag.rpath.split(":") if p)
        return ElfDeps(
            machine=str(elf["e_machine"]),
            elf_class=int(elf.elfclass),
            elf_type=str(elf["e_type"]),
            interpreter=interp,
            soname=soname,
            needed=tuple(needed),
            runpath=tuple(runpath),
        )
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
