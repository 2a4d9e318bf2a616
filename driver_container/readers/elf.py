"""An ELF file (a path opened without following a link, or bytes) to its ``ElfDeps`` (formats/elfdeps.py)."""

from __future__ import annotations

import io
import os
from pathlib import Path

from driver_container.base.errors import ElfFormatError
from driver_container.base.fileread import converted, open_nofollow, refuse_irregular
from driver_container.formats.elfdeps import ElfDeps, parse_elf_deps


def read_elf_deps(source: bytes | Path, *, name: str | None = None) -> ElfDeps:
    """Parse ``source`` (bytes, or a path opened without following a final symlink)."""
    if isinstance(source, bytes):
        return parse_elf_deps(io.BytesIO(source), name or "<bytes>")
    with converted(source, error=ElfFormatError, verb="cannot open", fix=f"check the permissions of {source}"):
        fd = open_nofollow(source)  # a FIFO opens at once (and is refused below) instead of waiting for a writer
    refuse_irregular(fd, name or source, error=ElfFormatError, fix="replace it with the real file")
    with os.fdopen(fd, "rb") as stream:
        return parse_elf_deps(stream, name or str(source))
