"""Turning an in-root path of USERSPACE_ROOT into a checked ``SourceFile``."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from driver_container.base.errors import PublishError, SymlinkLoopError, UserspaceError
from driver_container.base.resolver import Root
from driver_container.driverroot.index import UserspaceIndex
from driver_container.driverroot.manifest import SourceKey
from driver_container.formats.elfdeps import ELF_MAGIC, ElfDeps
from driver_container.publish.model import SourceFile
from driver_container.readers.elf import read_elf_deps
from driver_container.runtime.fsutil import open_regular

log = logging.getLogger(__name__)


class ElfFacts:
    """ELF facts by source identity: those recorded in the last manifest or in the image's index
    (``publish.index``) are reused, others are read.

    Parsing headers (and importing pyelftools, ~20 ms) is most of a scan's CPU time without them; a
    source whose path, size and mtime match its record is the file that was parsed then.
    """

    def __init__(self, known: Mapping[SourceKey, ElfDeps] | None = None, index: UserspaceIndex | None = None) -> None:
        self._known: dict[SourceKey, ElfDeps] = dict(known or {})
        self._index = index
        self.read = 0
        self.reused = 0
        self.from_index = 0

    def known(self) -> dict[SourceKey, ElfDeps]:
        """Every fact met so far, by identity (``index_build`` records them)."""
        return dict(self._known)

    def get(self, real: Path, shown: str, size: int, mtime_ns: int) -> ElfDeps:
        key = (str(real), size, mtime_ns)
        facts = self._known.get(key)
        if facts is not None:
            self.reused += 1
            return facts
        entry = self._index.lookup(real, size, mtime_ns) if self._index is not None else None
        if entry is not None and entry.elf is not None:
            self.from_index += 1
            facts = entry.elf
        else:
            self.read += 1
            facts = read_elf_deps(real, name=shown)
        self._known[key] = facts  # the closure meets the same files again
        return facts

    def get_if_elf(self, real: Path, shown: str, size: int, mtime_ns: int) -> ElfDeps | None:
        """Like ``get``, but None for a file without the ELF magic (e.g. a shell-script wrapper)."""
        if (str(real), size, mtime_ns) not in self._known:
            entry = self._index.lookup(real, size, mtime_ns) if self._index is not None else None
            if entry is not None and entry.is_elf is False:
                return None
            if entry is None or entry.elf is None:
                try:
                    fd, _st = open_regular(real, shown=shown)
                except PublishError as exc:
                    raise UserspaceError(exc.message, path=exc.path, fix=exc.fix) from exc
                try:
                    if os.read(fd, len(ELF_MAGIC)) != ELF_MAGIC:
                        return None
                finally:
                    os.close(fd)
        return self.get(real, shown, size, mtime_ns)


def source_file(root: Root, inner: str | PurePosixPath, *, elf: ElfFacts | None = None) -> SourceFile:
    """Resolve ``inner`` in the root to a readable regular file; clear errors for links that lead nowhere.

    With ``elf``, the file must be an ELF object and its facts come from there (reused or read).
    """
    shown = f"USERSPACE_ROOT/{str(inner).lstrip('/')}"
    try:
        real = root.resolve(inner)
    except SymlinkLoopError as exc:
        raise UserspaceError(
            f"{shown}: symlink loop ({exc.message})", path=shown, fix="fix or remove the link"
        ) from exc
    try:
        st = os.stat(real, follow_symlinks=False)
    except OSError as exc:
        target = root.inner_path(real) if real.is_relative_to(root.path) else real
        raise UserspaceError(
            f"{shown}: resolves to {target} inside USERSPACE_ROOT ({root.path}), which does not exist",
            path=shown,
            fix="absolute link targets are taken inside USERSPACE_ROOT (as chroot does); install the target there",
        ) from exc
    if not stat.S_ISREG(st.st_mode):
        raise UserspaceError(
            f"{shown}: not a regular file", path=shown, fix="remove it or replace it with the real file"
        )
    try:
        fd, st = open_regular(real, shown=shown)  # non-blocking, no final link, regular (fstat, not the lstat)
        os.close(fd)
    except PublishError as exc:
        raise UserspaceError(exc.message, path=exc.path, fix=exc.fix) from exc
    facts = elf.get(real, shown, st.st_size, st.st_mtime_ns) if elf is not None else None
    return SourceFile(real, shown, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), facts)
