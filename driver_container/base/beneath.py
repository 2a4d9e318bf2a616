"""Open a path below a root descriptor with no symlink at any component: the one helper for it.

Resolving a path (``resolver.Root.resolve``, chroot-like) and then opening the result by its full path leaves
a window: a directory component swapped for a symlink in between is followed by open(2), out of the root.
``open_beneath`` closes it: every component is looked up below a descriptor of the root and a symlink
anywhere is refused with ELOOP, never followed. The resolved paths handed here are symlink-free by
construction, so a refusal means the tree changed under the reader.

Two implementations with the same answers (tests/hostile/test_hostile_races.py runs both):

- ``openat2(2)`` with ``RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS`` (Linux 5.6; include/uapi/linux/openat2.h): one
  system call, the kernel refuses a link at any component and any escape from the root.
- a walk: each directory opened ``O_PATH|O_DIRECTORY|O_NOFOLLOW`` below its parent's descriptor, the last
  component ``O_NOFOLLOW``. Used where openat2 is missing (ENOSYS) or refused by a seccomp profile (EPERM;
  older container runtimes' default profiles), and by default: see ``USE_OPENAT2``.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import PurePosixPath
from typing import Any

PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
SYS_OPENAT2 = 437  # the same on x86_64 and aarch64 (arch/x86/entry/syscalls/syscall_64.tbl, asm-generic/unistd.h)
RESOLVE_NO_SYMLINKS = 0x04  # include/uapi/linux/openat2.h
RESOLVE_BENEATH = 0x08
# The walk by default: openat2 needs ctypes, ~2.5 ms to import (~2% of an unchanged restart, bench/startup.py),
# and saves ~3 us an open (8.3 against 11.1 us for /proc/sys/kernel/osrelease from its root's path, medians
# of 20000 here): a start opens far fewer than the ~800 files that would pay for the import.
USE_OPENAT2 = False
# Learnt on first use: "works" is absent until openat2 was tried; "syscall" is libc's syscall(2).
_learnt: dict[str, Any] = {}


def components(inner: str | PurePosixPath) -> list[str]:
    """The components of a path relative to a root; EXDEV (as openat2's RESOLVE_BENEATH) for '..'."""
    parts = [p for p in str(inner).split("/") if p not in ("", ".")]
    if ".." in parts:
        raise OSError(errno.EXDEV, "'..' below a root", str(inner))
    return parts


def open_beneath(
    root: str | os.PathLike[str] | int,
    inner: str | PurePosixPath,
    flags: int,
    mode: int = 0o600,
    *,
    openat2: bool | None = None,
) -> int:
    """A descriptor of ``root/inner`` (``flags`` as for open(2)) reached with no symlink at any component.

    ``root`` is a directory descriptor or a path (the root itself is configuration: a link to it is
    followed). Raises OSError: ELOOP for a symlink at any component, ENOENT, ENOTDIR, EXDEV for '..'.
    ``openat2`` picks the implementation (tests); None = ``USE_OPENAT2``.
    """
    parts = components(inner)
    # The whole path as os.open would announce it (PEP 578): the walk's own opens name one component each.
    sys.audit(
        "open", os.path.join(os.fsdecode(root) if not isinstance(root, int) else f"<fd {root}>", *parts), None, flags
    )
    if isinstance(root, int):
        return _open_below(root, parts, flags, mode, USE_OPENAT2 if openat2 is None else openat2)
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _open_below(root_fd, parts, flags, mode, USE_OPENAT2 if openat2 is None else openat2)
    finally:
        os.close(root_fd)


def _open_below(root_fd: int, parts: list[str], flags: int, mode: int, use_openat2: bool) -> int:
    if use_openat2 and _learnt.get("works") is not False:
        try:
            return _openat2(root_fd, "/".join(parts) or ".", flags, mode)
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM) or _openat2_available(root_fd):
                raise
    return _walk(root_fd, parts, flags, mode)


def _walk(root_fd: int, parts: list[str], flags: int, mode: int) -> int:
    if not parts:
        return os.open(".", flags | os.O_CLOEXEC, mode, dir_fd=root_fd)
    fd = root_fd
    try:
        for part in parts[:-1]:
            child = _open_component(fd, part, PATH_FLAGS, 0)
            if fd != root_fd:
                os.close(fd)
            fd = child
        return _open_component(fd, parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    finally:
        if fd != root_fd:
            os.close(fd)


def _open_component(parent: int, name: str, flags: int, mode: int) -> int:
    try:
        return os.open(name, flags, mode, dir_fd=parent)
    except OSError as exc:
        # O_PATH|O_NOFOLLOW opens a link itself and O_DIRECTORY then says ENOTDIR; openat2 says ELOOP.
        if exc.errno == errno.ENOTDIR and _is_link(parent, name):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from exc
        raise


def _is_link(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode)
    except OSError:
        return False


def _openat2(root_fd: int, inner: str, flags: int, mode: int) -> int:
    # Lazy, hot path: ctypes only where openat2 is asked for (USE_OPENAT2 above).
    import ctypes
    import struct

    syscall = _learnt.get("syscall")
    if syscall is None:
        syscall = _learnt["syscall"] = ctypes.CDLL(None, use_errno=True).syscall
        syscall.restype = ctypes.c_long
    # struct open_how {u64 flags; u64 mode; u64 resolve;} (openat2.h); mode must be 0 without O_CREAT.
    how = struct.pack(
        "=QQQ",
        (flags | os.O_CLOEXEC) & 0xFFFFFFFF,
        mode if flags & os.O_CREAT else 0,
        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
    )
    fd = syscall(SYS_OPENAT2, ctypes.c_int(root_fd), os.fsencode(inner), how, ctypes.c_size_t(len(how)))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), inner)
    return int(fd)


def _openat2_available(root_fd: int) -> bool:
    """Whether openat2 itself works here (an ENOSYS or EPERM was the syscall's, not the file's)."""
    try:
        os.close(_openat2(root_fd, ".", os.O_PATH | os.O_DIRECTORY, 0))
    except OSError as exc:
        _learnt["works"] = exc.errno not in (errno.ENOSYS, errno.EPERM)
    else:
        _learnt["works"] = True
    return bool(_learnt["works"])
