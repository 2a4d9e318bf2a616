"""Atomic, contained writes. Every write to the host goes through here.

A file is written to a temporary name in its target directory, fsync'ed, then renamed over the target,
so a reader sees the old or the new content, never a part (rename(2) is atomic within a filesystem).
Targets are checked to stay inside their root and no symlink on the way is followed out of it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from driver_container.errors import PublishError


def contained(root: Path, target: Path) -> Path:
    """``target`` (absolute, below ``root``) with every existing parent checked not to be a symlink."""
    try:
        relative = target.relative_to(root)
    except ValueError as exc:
        raise PublishError(f"{target}: outside its root {root}") from exc
    if ".." in relative.parts:
        raise PublishError(f"{target}: '..' in a published path")
    current = root
    for part in relative.parts[:-1]:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode):
            raise PublishError(f"{current}: is a symlink; refusing to write through it")
        if not stat.S_ISDIR(st.st_mode):
            raise PublishError(f"{current}: exists and is not a directory", fix=f"remove {current}")
    return target


def atomic_write(target: Path, data: bytes, *, mode: int = 0o644, root: Path | None = None) -> None:
    """Write ``data`` to ``target`` atomically (temp file + rename); creates parent directories."""
    if root is not None:
        contained(root, target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise PublishError(f"{target}: cannot create: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise PublishError(f"{target}: cannot write: {exc.strerror}") from exc


def atomic_write_text(target: Path, text: str, *, mode: int = 0o644, root: Path | None = None) -> None:
    atomic_write(target, text.encode(), mode=mode, root=root)
