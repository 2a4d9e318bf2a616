"""One snapshot of a directory tree, for tests that assert what a run changed (or did not) below a root.

Every entry is seen with ``lstat`` and never followed: a link is its target string, a FIFO or device is
never opened. A procfs or sysfs mounted in the tree (init's proc and sys in a published root,
driver_container/driverroot/procsys.py) is listed as the directory it is mounted on and never walked. The
options choose what each comparison needs; what is off is simply not compared. ``moved_aside`` takes one
entry out of a tree for the length of a ``with`` block (a test that proves what the entry protects).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from driver_container.formats.kernel.mountinfo import parse_mountinfo


class Entry(NamedTuple):
    mode: str  # stat.filemode: the type and every permission bit (setuid, sticky), e.g. "-rwxr-xr-x"
    content: str  # a regular file's sha256, a link's target, "" for anything else ("" too with content=False)
    nlink: int | None = None  # non-directories' link count, with nlink=True
    mtime_ns: int | None = None  # with mtime=True
    inode: int | None = None  # with inode=True


PSEUDO_FILESYSTEMS = ("proc", "sysfs")


def pseudo_mounts_below(top: Path) -> frozenset[Path]:
    """The mount points below ``top`` (this process's mount table) of a procfs or sysfs: never to be walked."""
    inside = str(top.resolve()) + "/"
    mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    return frozenset(
        top / m.mount_point[len(inside) :]
        for m in mounts
        if m.fstype in PSEUDO_FILESYSTEMS and m.mount_point.startswith(inside)
    )


def _content(path: Path, st: os.stat_result) -> str:
    if stat.S_ISREG(st.st_mode):
        return hashlib.sha256(path.read_bytes()).hexdigest()
    if stat.S_ISLNK(st.st_mode):
        return os.readlink(path)
    return ""


def snapshot(
    top: Path,
    *,
    skip: tuple[Path, ...] = (),
    dirs: bool = True,
    content: bool = True,
    nlink: bool = True,
    mtime: bool = False,
    inode: bool = False,
) -> dict[str, Entry]:
    """Every entry below ``top`` by its path relative to ``top``.

    ``skip``: paths left out, a directory with everything below it. ``dirs=False`` leaves directories out
    (their entries stay). ``nlink``: a directory's count is never compared (it changes with its
    subdirectories); a hard link made or broken shows in every other entry's. ``mtime`` and ``inode``
    show a file rewritten with the same content, or replaced.
    """
    found: dict[str, Entry] = {}
    pseudo = pseudo_mounts_below(top)
    for dirpath, dirnames, filenames in os.walk(top):
        here = Path(dirpath)
        listed = [d for d in dirnames if here / d not in skip]
        dirnames[:] = [d for d in listed if here / d not in pseudo]
        for name in [*listed, *filenames]:
            path = here / name
            if path in skip:
                continue
            st = os.lstat(path)
            is_dir = stat.S_ISDIR(st.st_mode)
            if is_dir and not dirs:
                continue
            found[str(path.relative_to(top))] = Entry(
                stat.filemode(st.st_mode),
                _content(path, st) if content else "",
                st.st_nlink if nlink and not is_dir else None,
                st.st_mtime_ns if mtime else None,
                st.st_ino if inode else None,
            )
    return found


@contextmanager
def moved_aside(path: Path) -> Iterator[Path]:
    """``path`` renamed to a sibling for the block, then put back (same inode: hard links stay intact)."""
    aside = path.with_name(path.name + ".moved-aside-by-test")
    os.rename(path, aside)
    try:
        yield aside
    finally:
        os.rename(aside, path)
