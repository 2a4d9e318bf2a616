"""A kernel module file's bytes to a ``ModuleInfo`` (readers/kmod.py opens the file).

Order of work follows kmod (libkmod-file.c, libkmod-module.c): decompress by magic, then the
signature at the end of the decompressed bytes, then ``.modinfo`` from the ELF section table.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from driver_container.base.errors import ModuleFormatError
from driver_container.formats.elfarch import HEADER_BYTES, elf_machine
from driver_container.formats.kmod.compression import decompress, detect_compression
from driver_container.formats.kmod.elf import read_sections
from driver_container.formats.kmod.model import ModuleInfo
from driver_container.formats.kmod.signature import split_signature

if TYPE_CHECKING:
    from driver_container.formats.kmod.compression import Buffer

log = logging.getLogger(__name__)

DEFAULT_MAX_SIZE = 1 << 30  # the largest real module (nvidia.ko, ~100 MB) is far below 1 GiB


def parse_modinfo(section: bytes, label: str) -> tuple[tuple[str, str], ...]:
    """NUL-separated ``key=value`` strings; runs of NULs (alignment padding) are skipped like kmod."""
    if section and not section.endswith(b"\0"):
        last = section.rsplit(b"\0", 1)[-1][:40]
        raise ModuleFormatError(
            f"{label}: .modinfo section does not end with a NUL byte (last entry {last!r} is "
            "unterminated): truncated or corrupt module",
            path=label,
        )
    fields: list[tuple[str, str]] = []
    for entry in section.split(b"\0"):
        if not entry:
            continue
        key, _, value = entry.decode("utf-8", "surrogateescape").partition("=")
        fields.append((key, value))
    return tuple(fields)


def _module_name(fields: tuple[tuple[str, str], ...], this_module: bytes | None, filename: str | None) -> str:
    for key, value in fields:
        if key == "name":
            return value
    if this_module:
        return this_module.decode("utf-8", "surrogateescape")
    if filename:
        # Last resort, what kmod itself does for a path (path_to_modname): basename up to the first '.'.
        return filename.rsplit("/", 1)[-1].split(".", 1)[0].replace("-", "_")
    return ""


def decode_module(data: Buffer, label: str, filename: str | None, max_size: int) -> ModuleInfo:
    """Decode one module's bytes. Raises ``ModuleFormatError`` naming ``label`` and the problem."""
    if not data:
        raise ModuleFormatError(f"{label}: empty file, not a kernel module", path=label)
    kind = detect_compression(data)
    data = decompress(data, kind, label, max_size)
    elf_size, signature = split_signature(data, label)
    sections = read_sections(data, label, elf_size)
    if sections.modinfo is None:
        raise ModuleFormatError(f"{label}: no .modinfo section: not a kernel module", path=label)
    fields = parse_modinfo(sections.modinfo, label)
    log.debug("read %s: %d .modinfo entries, compression %s", label, len(fields), kind)
    return ModuleInfo(
        filename=filename,
        name=_module_name(fields, sections.this_module_name, filename),
        fields=fields,
        signature=signature,
        compression=kind,
        machine=elf_machine(bytes(data[:HEADER_BYTES])),
    )
