"""Turning an in-root path of USERSPACE_ROOT into a checked ``SourceFile``."""

from __future__ import annotations

import os
import stat
from pathlib import PurePosixPath

from driver_container.elfdeps import read_elf_deps
from driver_container.errors import SymlinkLoopError, UserspaceError
from driver_container.paths import Root
from driver_container.publish.model import SourceFile


def source_file(root: Root, inner: str | PurePosixPath, *, with_elf: bool = False) -> SourceFile:
    """Resolve ``inner`` in the root to a readable regular file; clear errors for links that lead nowhere."""
    shown = f"USERSPACE_ROOT/{str(inner).lstrip('/')}"
    try:
        real = root.resolve(inner)
    except SymlinkLoopError as exc:
        raise UserspaceError(f"{shown}: symlink loop ({exc.message})", fix="fix or remove the link") from exc
    try:
        st = os.stat(real, follow_symlinks=False)
    except OSError as exc:
        target = root.inner_path(real) if real.is_relative_to(root.path) else real
        raise UserspaceError(
            f"{shown}: resolves to {target} inside USERSPACE_ROOT ({root.path}), which does not exist",
            fix="absolute link targets are taken inside USERSPACE_ROOT (as chroot does); install the target there",
        ) from exc
    if not stat.S_ISREG(st.st_mode):
        raise UserspaceError(f"{shown}: not a regular file", fix="remove it or replace it with the real file")
    try:
        os.close(os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC))
    except OSError as exc:
        raise UserspaceError(f"{shown}: cannot read: {exc.strerror}", fix=f"make {real} readable") from exc
    elf = read_elf_deps(real, name=shown) if with_elf else None
    return SourceFile(real, shown, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), elf)
