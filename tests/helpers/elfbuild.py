"""Tiny module-like ELF files of any class and byte order, for the paths no x86-64 fixture covers.

Layout (System V gABI): Ehdr, then the section contents, then the section header table. Sections:
null, .modinfo, .gnu.linkonce.this_module (a struct module with the name at offset 12/24), .shstrtab.
"""

from __future__ import annotations

import struct

EM = {(32, "<"): 3, (64, ">"): 22, (64, "<"): 62, (32, ">"): 8}  # i386, s390, x86-64, mips


def build_elf(modinfo: bytes, *, bits: int, order: str, this_module_name: bytes | None = b"tiny") -> bytes:
    """An ET_REL file with the given ``.modinfo`` contents; ``order`` is "<" (LSB) or ">" (MSB)."""
    ehsize, shentsize = (52, 40) if bits == 32 else (64, 64)
    name_offset = 12 if bits == 32 else 24
    sections: list[tuple[bytes, int, bytes]] = [(b".modinfo", 1, modinfo)]  # (name, sh_type, data)
    if this_module_name is not None:
        struct_module = bytearray(0x180)
        struct_module[name_offset : name_offset + len(this_module_name)] = this_module_name
        sections.append((b".gnu.linkonce.this_module", 1, bytes(struct_module)))
    names = b"\0" + b"".join(n + b"\0" for n, _, _ in sections) + b".shstrtab\0"
    sections.append((b".shstrtab", 3, names))
    body = bytearray()
    headers = [(0, 0, 0, 0)]  # (name offset, type, file offset, size)
    for name, sh_type, data in sections:
        headers.append((names.index(name + b"\0"), sh_type, ehsize + len(body), len(data)))
        body += data
        body += b"\0" * (-len(body) % 8)
    shoff = ehsize + len(body)
    ident = b"\x7fELF" + bytes([1 if bits == 32 else 2, 1 if order == "<" else 2, 1]) + b"\0" * 9
    # Elf{32,64}_Ehdr after e_ident: addresses and offsets are 4 bytes in ELF32, 8 in ELF64 (gABI).
    ehdr = "HHIIIIIHHHHHH" if bits == 32 else "HHIQQQIHHHHHH"
    rest = struct.pack(
        order + ehdr, 1, EM[bits, order], 1, 0, 0, shoff, 0, ehsize, 0, 0, shentsize, len(headers), len(headers) - 1
    )
    fmt = order + ("IIIIIIIIII" if bits == 32 else "IIQQQQIIQQ")
    table = b"".join(struct.pack(fmt, n, t, 0, 0, off, size, 0, 0, 1, 0) for n, t, off, size in headers)
    return ident + rest + bytes(body) + table
