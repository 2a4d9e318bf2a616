"""An ELF file (a path opened without following a link, or bytes) to its ``ElfDeps`` (formats/elfdeps.py)."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from driver_container.errors import ElfFormatError
from driver_container.formats.elfdeps import ElfDeps, parse_elf_deps


def read_elf_deps(source: bytes | Path, *, name: str | None = None) -> ElfDeps:
    """Parse ``source`` (bytes, or a path opened without following a final symlink)."""
    if isinstance(source, bytes):
        return parse_elf_deps(io.BytesIO(source), name or "<bytes>")
    try:
        # O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer.
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        fix = f"check the permissions of {source}"
        raise ElfFormatError(f"{source}: cannot open: {exc.strerror}", path=source, fix=fix) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ElfFormatError(
            f"{name or source}: not a regular file",
            path=name or source,
            fix="replace it with the real file",
        )
    with os.fdopen(fd, "rb") as stream:
        return parse_elf_deps(stream, name or str(source))
