"""Single instance: an exclusive flock on RUN_DIR/nvidia-driver.pid that holds our PID.

flock(2) locks belong to the open file description and vanish when the process dies, so a pid file left
by a killed instance never blocks (NVIDIA's script uses ``flock -n`` on the same file). The pid is
written in place, not by rename, because renaming a new file over the path would drop the lock from it.

Nobody else can take the lock: the file is created mode 0600 (``O_NOFOLLOW|O_CLOEXEC``), and one that
another uid owns, that others may open (mode), or that has a second name is replaced before it is used.
A lock held all the same (by a root process, or on a file an older version left world-readable) never
wedges a restart: its holder is looked up (lockholder.py). This program (``nvidia-driver``) holding it
means another init runs: refused, naming it. Any other program: a warning naming it, and the pid file is
unlinked and created anew, so that lock is left on a file no one looks at. A holder that cannot be
identified is refused as before, naming the pid the file holds.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from driver_container.base.errors import LockError
from driver_container.base.resolver import Root
from driver_container.formats.numbers import parse_uint
from driver_container.runtime.statusfiles import make_room

if TYPE_CHECKING:
    from driver_container.runtime.lockholder import Holder

log = logging.getLogger(__name__)

_ATTEMPTS = 5  # re-lock when the file was unlinked between our open and our flock, or replaced by us
# O_NONBLOCK: a FIFO planted at the path must not block the open; fstat then refuses it.
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


class PidLock:
    """``proc``: the host's procfs root, where the holder of a held lock is looked up (None: not looked up)."""

    def __init__(self, path: Path, proc: Root | None = None) -> None:
        self.path = path
        self._proc = proc
        self._fd: int | None = None

    def acquire(self) -> None:
        for _ in range(_ATTEMPTS):
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._held_elsewhere(fd)  # raises, or replaces a file another program holds
                continue
            if not _same_file(fd, self.path):
                os.close(fd)  # the holder released and unlinked the file after our open: the new one
                continue
            why = _not_private(fd)
            if why is not None:
                # We hold its lock now, so no live holder is displaced: another user's open descriptor of
                # it could take the lock after us; a new file is created in its place.
                log.warning("%s %s: replaced by a new pid file (mode 600)", self.path, why)
                self._unlink_and_close(fd)
                continue
            self._fd = fd
            self._write_pid(fd)
            return
        raise LockError(f"{self.path}: keeps being replaced; cannot lock it", path=self.path)

    def _held_elsewhere(self, fd: int) -> None:
        # Lazy, hot path: an unchanged restart finds the lock free; /proc/locks is read only when it is not.
        from driver_container.runtime.lockholder import PROGRAM, lock_holders

        holders = lock_holders(self._proc, fd) if self._proc is not None else ()
        if holders and all(holder.ours is False for holder in holders):
            log.warning(
                "%s is locked by %s, which is not %s: the pid file is replaced (that lock stays on the old file)",
                self.path,
                ", ".join(holder.describe() for holder in holders),
                PROGRAM,
            )
            self._unlink_and_close(fd)
            return
        ours = next((holder for holder in holders if holder.ours), None)
        pid = ours.pid if ours is not None else _read_pid(fd)
        os.close(fd)
        shown = pid if pid is not None else "unknown"
        raise LockError(
            f"already running (pid {shown}): {self.path} is locked {_by(ours, holders)}",
            path=self.path,
            holder=pid,
            fix="stop the other instance first; only one init may run per node",
        )

    def _unlink_and_close(self, fd: int) -> None:
        try:
            if _same_file(fd, self.path):
                self.path.unlink()
        except FileNotFoundError:
            pass  # gone already: the next open creates it
        except OSError as exc:
            raise LockError(
                f"{self.path}: cannot replace it: {exc.strerror}", path=self.path, fix=f"remove {self.path}"
            ) from exc
        finally:
            os.close(fd)

    def _open(self) -> int:
        """The pid file, opened without following a link or blocking on a FIFO. A directory, link or special
        file in its place cannot be a lock anyone holds: it is removed (never followed) and replaced."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = self._open_regular()
            if fd is None:
                make_room(self.path.parent, self.path.name)
                fd = self._open_regular()
        except OSError as exc:
            raise LockError(
                f"{self.path}: cannot open: {exc.strerror}", path=self.path, fix="check that RUN_DIR is writable"
            ) from exc
        if fd is None:
            raise LockError(
                f"{self.path}: not a regular file and cannot be replaced", path=self.path, fix=f"remove {self.path}"
            )
        return fd

    def _open_regular(self) -> int | None:
        """A descriptor of the pid file when it is (or is created as) a regular file; None otherwise."""
        try:
            fd = os.open(self.path, _OPEN_FLAGS, 0o600)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):  # a link, a directory, a socket
                return None
            if exc.errno == errno.EACCES:  # another user's file (we are not root): never ours
                log.warning("%s: not ours (cannot open it): removed", self.path)
                self.path.unlink()
                return None
            raise
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)
        return None

    def _write_pid(self, fd: int) -> None:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            os.fsync(fd)
        except OSError as exc:
            self.release()
            raise LockError(f"{self.path}: cannot write our pid: {exc.strerror}", path=self.path) from exc

    def release(self) -> None:
        """Remove the file, then drop the lock (in this order, so no one locks a file about to vanish)."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            if _same_file(self._fd, self.path):
                self.path.unlink()
        os.close(self._fd)
        self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> PidLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return None
    return parse_uint(text)


def _by(ours: Holder | None, holders: tuple[Holder, ...]) -> str:
    if ours is not None:
        return f"by {ours.describe()}"
    if holders:
        return f"by {', '.join(holder.describe() for holder in holders)}, which cannot be identified"
    return "by a process /proc/locks does not name (the pid is the file's)"


def _not_private(fd: int) -> str | None:
    """Why another user could open the file, or None: owned by our euid, mode 600 or less, one name."""
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}"
    if st.st_mode & 0o077:
        return f"has mode {stat.S_IMODE(st.st_mode):o}"
    if st.st_nlink != 1:
        return f"has {st.st_nlink} names (hard links)"
    return None


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)
