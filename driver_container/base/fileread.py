"""The one way a file is opened for reading, and the one place its OSError becomes the project's error.

Opening: ``O_NOFOLLOW`` (a link at the last component is refused, never followed; ``open_following``
is the exception for files that are links by design), ``O_NONBLOCK`` (opening a FIFO does not wait for
a writer; reads of a regular file are unaffected), ``O_CLOEXEC``; below a root, with no link at any
component (``open_below``, base/beneath.py). Checking: fstat of the descriptor, not of the name, says whether
it is a regular file (``regular_stat``, ``refuse_irregular``), so what is read is what was checked.
Reading: never more than the caller's limit plus one byte (``read_up_to``), so a huge or endless file
is cut or refused (``refuse_larger``), never read whole.

The functions above raise OSError only. ``converted`` is the boundary that turns it into the caller's
class from base/errors.py (HostReadError by default; PublishError for the publisher), as psutil's
``wrap_exceptions`` turns OSError into NoSuchProcess and AccessDenied in one place (giampaolo/psutil,
psutil/_pslinux.py @ d77cf39abb5b423bde4bb0420eba78203281376b). Only ``os``, ``stat`` and base/errors.py
are imported here: the peermem probe reads /proc/modules through this module (lifecycle/peermem_glance.py).
"""

from __future__ import annotations

import errno
import os
import stat

from driver_container.base.errors import HostReadError, PathError

TYPE_CHECKING = False  # typing stays unimported at run time (the probe above); type checkers read True
if TYPE_CHECKING:
    from types import TracebackType

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# Only these say a file is not there; every other errno says it could not be read, and the I/O and resource
# errors below say nothing about the file at all (this process ran out of descriptors or memory, the
# storage failed): they are named with their errno, so no reader mistakes them for an absent file.
MISSING_ERRNOS = (errno.ENOENT, errno.ENOTDIR)
IO_ERRNOS = (errno.EIO, errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS)
_FIRST_READ = 1 << 16  # procfs and sysfs files fit (a page or so per read); then each read doubles
_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISBLK, "a block device"),
)


def open_nofollow(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> int:
    """A read-only, non-blocking descriptor of ``path``; a link at its last component is refused (ELOOP)."""
    return os.open(path, READ_FLAGS, dir_fd=dir_fd)


def open_following(path: str | os.PathLike[str]) -> int:
    """As ``open_nofollow``, but a final link is followed: for files that are links by design (kubelet's
    service-account files point into ``..data``); the fstat check still refuses what is not regular."""
    return os.open(path, READ_FLAGS & ~os.O_NOFOLLOW)


def open_below(root: str | os.PathLike[str], inner: str, flags: int = READ_FLAGS) -> int:
    """``root/inner`` opened with ``flags`` (read-only ones) and no link at any component (base/beneath.py)."""
    # Lazy, hot path: base/beneath.py imports pathlib, which the peermem probe must not load (see the module doc).
    from driver_container.base.beneath import open_beneath

    return open_beneath(root, inner, flags | os.O_NOFOLLOW | os.O_CLOEXEC)


def is_missing(exc: OSError) -> bool:
    """Whether ``exc`` says the path is not there (ENOENT, ENOTDIR), the only errors that mean "missing"."""
    return exc.errno in MISSING_ERRNOS


def is_io_error(exc: BaseException) -> bool:
    """Whether the project error ``exc`` came from an I/O or resource error (``IO_ERRNOS``, its cause)."""
    cause = exc.__cause__
    return isinstance(cause, OSError) and cause.errno in IO_ERRNOS


def why(exc: OSError) -> str:
    """The OS's words for ``exc``; an I/O or resource error (``IO_ERRNOS``) also by its errno name, as in
    "Too many open files (EMFILE)", so a message says the read failed, not that the file is absent."""
    words = exc.strerror or str(exc)
    if exc.errno in IO_ERRNOS:
        return f"{words} ({errno.errorcode[exc.errno]})"
    return words


def regular_stat(fd: int) -> os.stat_result | None:
    """The descriptor's fstat when it is a regular file; None for anything else."""
    st = os.fstat(fd)
    return st if stat.S_ISREG(st.st_mode) else None


def kind_of(fd: int) -> str:
    """What the descriptor is, for messages: "a regular file", "a FIFO", "a character device"..."""
    mode = os.fstat(fd).st_mode
    return next((name for test, name in _KINDS if test(mode)), "special")


def refuse_irregular(
    fd: int,
    shown: str | os.PathLike[str],
    *,
    error: type[PathError] = HostReadError,
    what: str = "",
    fix: str | None = None,
) -> os.stat_result:
    """``regular_stat(fd)``, or ``fd`` closed and ``error`` raised: "<shown>: [<what> is ]not a regular file"."""
    st = regular_stat(fd)
    if st is None:
        os.close(fd)
        subject = f"{what} is " if what else ""
        raise error(f"{os.fspath(shown)}: {subject}not a regular file", path=shown, fix=fix)
    return st


def read_up_to(fd: int, count: int) -> bytes:
    """At most ``count`` bytes from ``fd``'s position, fewer only at end of file."""
    chunks: list[bytes] = []
    size = 0
    while size < count:
        chunk = os.read(fd, min(count - size, max(_FIRST_READ, size)))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def refuse_larger(
    data: bytes,
    limit: int,
    shown: str | os.PathLike[str],
    *,
    error: type[PathError] = HostReadError,
    what: str = "",
    fix: str | None = None,
) -> bytes:
    """``data`` (read with ``read_up_to(fd, limit + 1)``), or ``error``: "<shown>: [<what> is ]larger than..."."""
    if len(data) > limit:
        subject = f"{what} is " if what else ""
        raise error(f"{os.fspath(shown)}: {subject}larger than {limit} bytes", path=shown, fix=fix)
    return data


class converted:  # noqa: N801 - used as a function: ``with converted(path): ...``
    """The boundary: an OSError raised in the block becomes ``error("<shown>: <verb>: <why>")``.

    ``missing`` (a class) is raised instead as "<shown>: no such file" on ENOENT and ENOTDIR (a file where
    a directory should be) and on nothing else: EMFILE or EIO is a read that failed (``why`` names it);
    ``loop`` replaces the OS's words for ELOOP. Other exceptions pass through.
    A class, not contextlib: the probe above must not import contextlib."""

    __slots__ = ("error", "fix", "loop", "missing", "shown", "verb")

    def __init__(
        self,
        shown: str | os.PathLike[str],
        *,
        error: type[PathError] = HostReadError,
        verb: str = "cannot read",
        missing: type[PathError] | None = None,
        loop: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.shown, self.error, self.verb = os.fspath(shown), error, verb
        self.missing, self.loop, self.fix = missing, loop, fix

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if not isinstance(exc, OSError):
            return
        if self.missing is not None and is_missing(exc):
            raise self.missing(f"{self.shown}: no such file", path=self.shown) from exc
        words = self.loop if self.loop is not None and exc.errno == errno.ELOOP else why(exc)
        raise self.error(f"{self.shown}: {self.verb}: {words}", path=self.shown, fix=self.fix) from exc
