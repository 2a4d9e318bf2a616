"""Tiny dynamically linked ELF64 (x86-64, LSB) files with any PT_INTERP, DT_NEEDED, DT_SONAME and
DT_RUNPATH, for hostile-image tests (tests/helpers/elfbuild.py builds relocatable modules instead).

Layout (System V gABI): Ehdr, three Phdrs (PT_LOAD covering the whole file at vaddr 0, so a file offset
is its address; PT_INTERP; PT_DYNAMIC), the interpreter string, .dynstr, then the dynamic array.
"""

from __future__ import annotations

import struct

PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RUNPATH = 0, 1, 5, 10, 14, 29
EHDR, PHDR = 64, 56


def build_dynamic_elf(
    *,
    interpreter: bytes | None = None,
    needed: tuple[bytes, ...] = (),
    soname: bytes | None = None,
    runpath: bytes | None = None,
    executable: bool = True,
) -> bytes:
    strtab = bytearray(b"\0")
    tags: list[tuple[int, int]] = []

    def string(value: bytes) -> int:
        strtab.extend(value + b"\0")
        return len(strtab) - len(value) - 1

    tags += [(DT_NEEDED, string(n)) for n in needed]
    if soname is not None:
        tags.append((DT_SONAME, string(soname)))
    if runpath is not None:
        tags.append((DT_RUNPATH, string(runpath)))
    phnum = 3 if interpreter is not None else 2
    interp_off = EHDR + phnum * PHDR
    interp = interpreter + b"\0" if interpreter is not None else b""
    strtab_off = interp_off + len(interp)
    dynamic_off = (strtab_off + len(strtab) + 7) // 8 * 8
    tags += [(DT_STRTAB, strtab_off), (DT_STRSZ, len(strtab)), (DT_NULL, 0)]
    dynamic = b"".join(struct.pack("<qQ", t, v) for t, v in tags)
    size = dynamic_off + len(dynamic)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    e_type = 2 if executable else 3
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", e_type, 62, 1, 0, EHDR, 0, 0, EHDR, PHDR, phnum, 64, 0, 0)
    phdrs = struct.pack("<IIQQQQQQ", PT_LOAD, 5, 0, 0, 0, size, size, 0x1000)
    if interpreter is not None:
        phdrs += _phdr(PT_INTERP, 4, interp_off, len(interp), 1)
    phdrs += _phdr(PT_DYNAMIC, 6, dynamic_off, len(dynamic), 8)
    body = ehdr + phdrs + interp + bytes(strtab)
    return body + b"\0" * (dynamic_off - len(body)) + dynamic


def _phdr(p_type: int, flags: int, offset: int, size: int, align: int) -> bytes:
    """Elf64_Phdr: type, flags, offset, vaddr, paddr, filesz, memsz, align (vaddr = offset)."""
    return struct.pack("<IIQQQQQQ", p_type, flags, offset, offset, offset, size, size, align)
