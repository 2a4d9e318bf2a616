"""Kernel module files: ``read_module`` (a path or bytes to a ``ModuleInfo``) and ``find_module`` (by name in a
module tree, like ``modinfo -b BASEDIR -k KVER NAME``). The bytes are decoded by formats/kmod/decode.py."""

from __future__ import annotations

import errno
import logging
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from driver_container.base.errors import HostReadError, ModuleFormatError, ModuleNotFoundInTreeError
from driver_container.base.fileread import kind_of, regular_stat
from driver_container.base.resolver import Root
from driver_container.formats.kmod.decode import DEFAULT_MAX_SIZE, decode_module
from driver_container.formats.kmod.lookup import module_name_of, module_path_in_dep, normalize
from driver_container.formats.kmod.model import ModuleInfo

if TYPE_CHECKING:
    from driver_container.formats.kmod.compression import Buffer

log = logging.getLogger(__name__)

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
        info = regular_stat(fd)
        if info is None and kind_of(fd) == "a directory":
            raise ModuleFormatError(f"{label}: is a directory, not a module file", path=label)
        if info is None:  # a FIFO or device: read as kmod reads it, up to the cap
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


def read_module(
    source: str | Path | bytes, *, max_size: int = DEFAULT_MAX_SIZE, filename: str | None = None
) -> ModuleInfo:
    """Read one module. Raises ``ModuleFormatError`` naming the file and the problem."""
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        label = filename or "<module bytes>"
        if len(data) > max_size:
            raise ModuleFormatError(f"{label}: {len(data)} bytes is over the {max_size}-byte cap", path=label)
        return decode_module(data, label, filename, max_size)
    filename = filename or absolute_name(source)
    with _contents(source, filename, max_size) as contents:
        return decode_module(contents, filename, filename, max_size)


# modules.dep of a full distribution kernel is well under 1 MiB (~6000 modules of ~100 bytes a line); the
# scan below costs ~0.25 s a MiB of short lines, so 8 MiB keeps a crafted file within a few seconds
# (64 MiB of "a:" lines took 17 s).
DEP_LIMIT = 8 << 20


def find_module(name: str, kver: str, basedir: Path) -> Path:
    """The real path of module ``name`` for kernel ``kver`` under ``basedir``."""
    root = Root(basedir)
    tree = PurePosixPath("/lib/modules") / kver
    wanted = normalize(name)
    try:
        dep = root.read_text_or_none(tree / "modules.dep", limit=DEP_LIMIT)
        if dep is not None:
            found = module_path_in_dep(dep, wanted)
            if found is not None:
                return root.resolve(tree / found)
            log.debug("%s not in %s/modules.dep", wanted, tree)
        elif root.is_dir(tree):
            for inner in root.walk_files(tree):
                if module_name_of(inner.name) == wanted:
                    return root.resolve(inner)
    except HostReadError as exc:
        raise ModuleNotFoundInTreeError(
            f"module {name}: cannot read the tree {basedir}{tree}: {exc}",
            module=name,
            kernel=kver,
            tree=f"{basedir}{tree}",
        ) from exc
    where = "modules.dep" if dep is not None else "the tree"
    if dep is None and not root.is_dir(tree):
        where = "nothing: the directory does not exist"
    raise ModuleNotFoundInTreeError(
        f"module {name} not found for kernel {kver} under {basedir}{tree} (searched {where})",
        module=name,
        kernel=kver,
        tree=f"{basedir}{tree}",
        fix="check the kernel version (-k) and the base directory (-b)",
    )
