"""lstat and readlink of paths below a root through directory descriptors, never following a link."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from driver_container.base.errors import PublishError
from driver_container.base.fileread import is_io_error
from driver_container.runtime.fsutil import open_dir


class Tree:
    """lstat of paths below a root through directory descriptors (one per directory, kept open)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._dirs: dict[PurePosixPath, int | None] = {}

    def dir_fd(self, rel: PurePosixPath) -> int | None:
        """A descriptor of the real directory ``rel``; None when it is missing or not a directory.
        PublishError when it could not be opened for an I/O or resource error (EMFILE, EIO...): that says
        nothing of the directory, and must not read as missing."""
        if rel not in self._dirs:
            try:
                self._dirs[rel] = open_dir(self.root, rel)
            except PublishError as exc:
                if is_io_error(exc):
                    raise
                self._dirs[rel] = None
        return self._dirs[rel]

    def lstat(self, rel: PurePosixPath) -> os.stat_result | None:
        fd = self.dir_fd(rel.parent)
        if fd is None:
            return None
        try:
            return os.lstat(rel.name, dir_fd=fd)
        except FileNotFoundError:
            return None

    def readlink(self, rel: PurePosixPath) -> str | None:
        fd = self.dir_fd(rel.parent)
        try:
            return os.readlink(rel.name, dir_fd=fd) if fd is not None else None
        except OSError:
            return None

    def close(self) -> None:
        for fd in self._dirs.values():
            if fd is not None:
                os.close(fd)
        self._dirs.clear()
