"""Single instance: an exclusive flock on RUN_DIR/nvidia-driver.pid that holds our PID.

flock(2) locks belong to the open file description and vanish when the process dies, so a pid file left
by a killed instance never blocks (NVIDIA's script uses ``flock -n`` on the same file). The pid is
written in place, not by rename, because renaming a new file over the path would drop the lock from it.
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

from driver_container.errors import LockError
from driver_container.formats.numbers import parse_uint
from driver_container.runtime.statusfiles import make_room

log = logging.getLogger(__name__)

_ATTEMPTS = 5  # re-lock when the file was unlinked between our open and our flock
# O_NONBLOCK: a FIFO planted at the path must not block the open; fstat then refuses it.
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


class PidLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        for _ in range(_ATTEMPTS):
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_pid(fd)
                os.close(fd)
                raise LockError(
                    f"already running (pid {holder if holder is not None else 'unknown'}): {self.path} is locked",
                    path=self.path,
                    holder=holder,
                    fix="stop the other instance first; only one init may run per node",
                ) from None
            if _same_file(fd, self.path):
                self._fd = fd
                self._write_pid(fd)
                return
            # The holder released and unlinked the file after our open: retry on the new path.
            os.close(fd)
        raise LockError(f"{self.path}: keeps being replaced; cannot lock it", path=self.path)

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
            fd = os.open(self.path, _OPEN_FLAGS, 0o644)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):  # a link, a directory, a socket
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


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)
