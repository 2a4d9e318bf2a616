"""``Root``: chroot-like access inside one directory (base/paths.py's ``HostPaths`` names the roots).

A ``Root`` resolves symlinks as the kernel would after
``chroot(root)`` (absolute targets restart at the root, ``..`` stops there, over 40 links is a loop: Linux
``MAXSYMLINKS``, fs/namei.c), then opens the result from the root with no link at any component
(base/beneath.py). So nothing outside a root is read, whatever the links in a hostile tree say or become.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from driver_container.base.errors import HostFileNotFound, HostReadError, SymlinkLoopError
from driver_container.base.fileread import (
    READ_FLAGS,
    converted,
    open_below,
    read_up_to,
    refuse_irregular,
    refuse_larger,
    why,
)
from driver_container.base.records import NamedRecord

MAX_SYMLINKS = 40  # Linux MAXSYMLINKS: ELOOP after 40 links in one lookup (fs/namei.c)
DEFAULT_READ_LIMIT = 1 << 20  # kernel text files and os-release are far below 1 MiB
LINK_APPEARED = "a symlink appeared in it while it was read"  # ELOOP below a root: the paths were link-free


def _split(inner: str | PurePosixPath) -> list[str]:
    return [p for p in str(inner).split("/") if p not in ("", ".")]


class Root(NamedRecord):
    """A directory seen as ``/`` by the code that reads below it (a NamedRecord: base/records.py says why)."""

    path: Path
    # lstat answers remembered for the lifetime of this object (see ``snapshot``): None = not remembered.
    lstat_memo: dict[str, tuple[int, str] | None] | None = None

    def snapshot(self) -> Root:
        """The same root, remembering every lstat: one pass over a tree (a publish resolves ~170 paths)."""
        return Root(self.path, {})

    def _kind(self, candidate: str) -> tuple[int, str] | None:
        """(st_mode, link target or "") of ``candidate``; None when it does not exist."""
        if self.lstat_memo is not None and candidate in self.lstat_memo:
            return self.lstat_memo[candidate]
        try:
            mode = os.lstat(candidate).st_mode
            found = (mode, os.readlink(candidate) if stat.S_ISLNK(mode) else "")
        except (FileNotFoundError, NotADirectoryError):
            found = None
        except OSError as exc:
            raise HostReadError(f"{candidate}: {why(exc)}", path=candidate) from exc
        if self.lstat_memo is not None:
            self.lstat_memo[candidate] = found
        return found

    def resolve(self, inner: str | PurePosixPath, *, follow_last: bool = True) -> Path:
        """Resolve ``inner`` below the root as chroot would; missing tails are kept verbatim."""
        parts = self.resolve_parts(inner, follow_last=follow_last)
        return self.path.joinpath(*parts)

    def resolve_parts(self, inner: str | PurePosixPath, *, follow_last: bool = True) -> list[str]:
        """``resolve``'s answer as components below the root: no link among them (a missing tail aside)."""
        # Strings, not pathlib, on purpose: this runs for every published file and every poll.
        base = os.fspath(self.path).rstrip("/") or ""
        pending = deque(_split(inner))
        done: list[str] = []
        links = 0
        while pending:
            name = pending.popleft()
            if name == "..":
                if done:
                    done.pop()
                continue
            kind = self._kind("/".join((base, *done, name)))
            if kind is None:
                return [*done, name, *pending]
            if not stat.S_ISLNK(kind[0]) or (not pending and not follow_last):
                done.append(name)
                continue
            links += 1
            if links > MAX_SYMLINKS:
                where = self.path / str(inner).lstrip("/")
                fix = "remove the symlink loop from the tree"
                raise SymlinkLoopError(f"{where}: too many levels of symbolic links", path=where, fix=fix)
            target = kind[1]
            if target.startswith("/"):
                done = []
            pending.extendleft(reversed(_split(target)))
        return done

    def inner_path(self, real: Path) -> PurePosixPath:
        """The in-root absolute path of a real path below the root."""
        return PurePosixPath("/") / real.relative_to(self.path)

    def open_resolved(self, inner: str | PurePosixPath, flags: int) -> tuple[int, Path]:
        """(fd, real path) of ``inner`` resolved, then opened with no link at any component (base/beneath.py)."""
        parts = self.resolve_parts(inner)
        real = self.path.joinpath(*parts)
        # ENOTDIR is "no such file" too: a file where a directory is, as _kind says.
        with converted(real, verb="cannot open", missing=HostFileNotFound, loop=LINK_APPEARED):
            return open_below(self.path, "/".join(parts), flags), real

    def read_bytes(self, inner: str | PurePosixPath, *, limit: int = DEFAULT_READ_LIMIT) -> bytes:
        fd, real = self.open_resolved(inner, READ_FLAGS)
        refuse_irregular(fd, real, fix="check what is mounted or linked at this path")
        try:
            with converted(real):
                data = read_up_to(fd, limit + 1)
        finally:
            os.close(fd)
        return refuse_larger(data, limit, real, fix="check that it is the right file")

    def read_text(self, inner: str | PurePosixPath, *, limit: int = DEFAULT_READ_LIMIT) -> str:
        return self.read_bytes(inner, limit=limit).decode("utf-8", errors="replace")

    def read_text_or_none(self, inner: str | PurePosixPath, *, limit: int = DEFAULT_READ_LIMIT) -> str | None:
        try:
            return self.read_text(inner, limit=limit)
        except HostFileNotFound:
            return None

    def listdir(self, inner: str | PurePosixPath) -> list[str]:
        """Sorted entry names of a directory; empty when it does not exist."""
        try:
            fd, _real = self.open_resolved(inner, os.O_RDONLY | os.O_DIRECTORY)
        except HostFileNotFound:
            return []
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def lstat(self, inner: str | PurePosixPath) -> os.stat_result | None:
        try:
            return os.lstat(self.resolve(inner, follow_last=False))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def stat(self, inner: str | PurePosixPath) -> os.stat_result | None:
        try:
            return os.stat(self.resolve(inner), follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def is_dir(self, inner: str | PurePosixPath) -> bool:
        st = self.stat(inner)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def is_file(self, inner: str | PurePosixPath) -> bool:
        st = self.stat(inner)
        return st is not None and stat.S_ISREG(st.st_mode)

    def exists(self, inner: str | PurePosixPath) -> bool:
        return self.stat(inner) is not None

    def walk_files(self, inner: str | PurePosixPath) -> Iterator[PurePosixPath]:
        """In-root paths of regular files and links below ``inner``, without following directory links."""
        top = self.resolve(inner)
        for dirpath, _dirs, files in os.walk(top):
            for name in sorted(files):
                yield self.inner_path(Path(dirpath) / name)
