"""Bounded reads of host files into report members.

Every path is resolved inside its ``Root`` as chroot would (base/resolver.py), opened ``O_NOFOLLOW|O_NONBLOCK``
(a FIFO cannot hang the read), checked with fstat to be a regular file (procfs and sysfs files are; both
by base/fileread.py), and
read no further than its cap plus one byte, so a huge or endless file is cut, never read whole. Whatever
goes wrong becomes the member's note: the report is about a broken node, so nothing here raises.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import PurePosixPath

from driver_container.base.errors import HostFileNotFound, HostReadError
from driver_container.base.fileread import READ_FLAGS, kind_of, read_up_to, regular_stat
from driver_container.base.resolver import Root
from driver_container.report.model import ABSENT, Member, missing

MAX_ENTRIES = 256  # entries taken from one directory (sysfs parameters, GPUs, capabilities)
SMALL_CAP = 64 << 10  # a procfs/sysfs text file


def source_of(root: Root, inner: str | PurePosixPath) -> str:
    return f"{os.fspath(root.path).rstrip('/')}/{str(inner).lstrip('/')}"


def read_capped(root: Root, inner: str | PurePosixPath, cap: int) -> tuple[bytes | None, str]:
    """(the first ``cap`` + 1 bytes at most, "") or (None, why not)."""
    try:  # from the root, no link at any component (resolver.Root.open_resolved, base/beneath.py)
        fd, _real = root.open_resolved(inner, READ_FLAGS)
    except HostFileNotFound:
        return None, ABSENT
    except HostReadError as exc:
        return None, f"unreadable: {exc.message}"
    try:
        if regular_stat(fd) is None:
            return None, f"not read: not a regular file ({kind_of(fd)})"
        return read_up_to(fd, cap + 1), ""
    except OSError as exc:
        return None, f"unreadable: {exc.strerror}"
    finally:
        os.close(fd)


def file_member(root: Root, inner: str | PurePosixPath, name: str, cap: int = SMALL_CAP) -> Member:
    data, why = read_capped(root, inner, cap)
    return Member(name, source_of(root, inner), data, why)


def entries(root: Root, inner: str | PurePosixPath) -> tuple[list[str], str]:
    """(sorted names, at most ``MAX_ENTRIES``, "") or ([], why not) / (names, "N more left out")."""
    try:
        names = root.listdir(inner)
    except HostReadError as exc:
        return [], f"unreadable: {exc.message}"
    if len(names) > MAX_ENTRIES:
        return names[:MAX_ENTRIES], f"{len(names) - MAX_ENTRIES} more entries left out"
    return names, ""


def walk(root: Root, inner: str, depth: int = 4) -> Iterator[PurePosixPath]:
    """In-root paths of the regular files below ``inner``, links not followed, bounded in depth and width."""
    names, _why = entries(root, inner)
    for name in names:
        path = PurePosixPath(inner) / name
        st = root.lstat(path)
        if st is None:
            continue
        if stat.S_ISDIR(st.st_mode) and depth > 0:
            yield from walk(root, str(path), depth - 1)
        elif stat.S_ISREG(st.st_mode):
            yield path


def absent_dir(name: str, root: Root, inner: str) -> Member:
    return missing(name, source_of(root, inner), ABSENT)
