"""``read_module``: a module file (path or bytes) to a ``ModuleInfo``.

Order of work follows kmod (libkmod-file.c, libkmod-module.c): decompress by magic, then the
signature at the end of the decompressed bytes, then ``.modinfo`` from the ELF section table.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from driver_container.errors import ModuleFormatError
from driver_container.formats.elfarch import HEADER_BYTES, elf_machine
from driver_container.formats.kmod.compression import Buffer, decompress, detect_compression
from driver_container.formats.kmod.elf import read_sections
from driver_container.formats.kmod.model import ModuleInfo
from driver_container.formats.kmod.signature import split_signature

log = logging.getLogger(__name__)

DEFAULT_MAX_SIZE = 1 << 30  # the largest real module (nvidia.ko, ~100 MB) is far below 1 GiB
# Files this large are mapped, not read: a plain nvidia.ko is ~100 MB and only its headers,
# .modinfo and signature are needed (kmod maps uncompressed files for the same reason). Module trees
# are not rewritten in place (Talos: read-only image; depmod/dpkg replace files by rename), so the
# map cannot shrink under us.
MMAP_THRESHOLD = 1 << 20


def absolute_name(path: str | Path) -> str:
    """The file name kmod prints: made absolute by prefixing the cwd, without normalising.

    libkmod's kmod_module_new_from_path keeps the argument's text and only prefixes ``cwd + "/"``
    when it is relative (path_make_absolute_cwd): ``./x.ko`` prints ``<cwd>/./x.ko`` and ``a//b.ko``
    keeps its ``//`` (checked against kmod 30's modinfo). Pass the argument as given: ``Path()``
    already drops ``./`` and doubled slashes.
    """
    text = path if isinstance(path, str) else os.fsdecode(path)
    return text if text.startswith("/") else f"{os.getcwd()}/{text}"


def _read_capped(fd: int, max_size: int, first: int) -> bytes:
    """Up to ``max_size + 1`` bytes to the end of the file; ``first`` sizes the first read (st_size + 1
    reads a regular file in one call; a FIFO or device has no size to trust)."""
    chunks: list[bytes] = []
    total = 0
    size = first
    while total <= max_size:
        chunk = os.read(fd, min(size, max_size + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        size = 1 << 20
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_big(label: str, size: int, max_size: int) -> ModuleFormatError:
    return ModuleFormatError(f"{label}: file of {size} bytes is over the {max_size}-byte cap", path=label)


def _unreadable(label: str, exc: OSError) -> ModuleFormatError:
    reason = exc.strerror or errno.errorcode.get(exc.errno or 0, "I/O error")
    return ModuleFormatError(f"{label}: cannot read: {reason}", path=label)


@contextmanager
def _contents(path: str | Path, label: str, max_size: int) -> Iterator[Buffer]:
    """The file's bytes; a large regular file is mapped instead of read (see MMAP_THRESHOLD).

    A file descriptor and ``os.read``, not ``open()``: a buffered file object per module would be ~10%
    of modinfo over a module tree (bench/modinfo.py)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise _unreadable(label, exc) from exc
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ModuleFormatError(f"{label}: is a directory, not a module file", path=label)
        if not stat.S_ISREG(info.st_mode):
            data = _read_capped(fd, max_size, 1 << 20)
            if len(data) > max_size:
                raise _too_big(label, len(data), max_size)
        elif info.st_size > max_size:
            raise _too_big(label, info.st_size, max_size)
        elif info.st_size >= MMAP_THRESHOLD:
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mapped:
                yield mapped
                return
        else:
            data = _read_capped(fd, max_size, info.st_size + 1)
    except OSError as exc:
        raise _unreadable(label, exc) from exc
    finally:
        os.close(fd)
    yield data


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


def read_module(
    source: str | Path | bytes, *, max_size: int = DEFAULT_MAX_SIZE, filename: str | None = None
) -> ModuleInfo:
    """Read one module. Raises ``ModuleFormatError`` naming the file and the problem."""
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        label = filename or "<module bytes>"
        if len(data) > max_size:
            raise ModuleFormatError(f"{label}: {len(data)} bytes is over the {max_size}-byte cap", path=label)
        return _parse(data, label, filename, max_size)
    filename = filename or absolute_name(source)
    with _contents(source, filename, max_size) as contents:
        return _parse(contents, filename, filename, max_size)


def _parse(data: Buffer, label: str, filename: str | None, max_size: int) -> ModuleInfo:
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
