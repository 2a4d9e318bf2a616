"""``init``'s own log lines, kept under RUN_DIR for ``bug-report``: a pod's stdout cannot be read from
inside the pod, and on Talos there is no shell on the node to read the kubelet's copy.

``RUN_DIR/nvidia-driver.log`` is appended to and, once a line would take it past ``LOG_CAP``, renamed to
``nvidia-driver.log.1`` (replacing the previous one) and started afresh: at most 2 x ``LOG_CAP`` on disk.
The file is opened through a descriptor of RUN_DIR with ``O_NOFOLLOW|O_NONBLOCK``, and must be a regular
file: a symlink planted at the name is refused (ELOOP), a FIFO cannot block a write (ENXIO without a
reader), so nothing outside RUN_DIR is ever written. Keeping the copy is best effort: the first failure
writes one warning to stderr and turns the copy off; ``init`` itself never fails over it.

Only ``init`` installs it (cli/init_cmd.py); ``status``, the probes and ``bug-report`` never write here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import sys
from pathlib import Path
from typing import TextIO

from driver_container.base.errors import DriverContainerError
from driver_container.runtime.fsutil import open_dir, write_all
from driver_container.runtime.statusfiles import make_room

LOG_FILE = "nvidia-driver.log"  # in RUN_DIR
ROTATED_LOG_FILE = LOG_FILE + ".1"
LOG_CAP = 256 << 10  # per file; two files at most
FILE_FORMAT = "%(asctime)s %(levelname)-7s %(message)s"
_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class RunDirLog(logging.Handler):
    """Appends each record's line to RUN_DIR/nvidia-driver.log (see the module doc)."""

    def __init__(self, run_dir: Path, *, cap: int = LOG_CAP, stderr: TextIO | None = None) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.cap = cap
        self._stderr = stderr
        self._dir_fd = -1
        self._fd = -1
        # A date in every line: the copy spans restarts (the stderr format shows the time only).
        self.setFormatter(logging.Formatter(FILE_FORMAT, datefmt="%Y-%m-%dT%H:%M:%S%z"))

    def open(self) -> None:
        """Open RUN_DIR and the log file; raises OSError or DriverContainerError. A directory, link or FIFO
        at the log's name is removed (never followed) and the file created once more."""
        self._dir_fd = open_dir(self.run_dir, "", create=True)
        try:
            self._fd = self._open_file()
        except OSError:
            make_room(self.run_dir, LOG_FILE)
            self._fd = self._open_file()

    def _open_file(self) -> int:
        fd = os.open(LOG_FILE, _OPEN_FLAGS, 0o644, dir_fd=self._dir_fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{self.run_dir / LOG_FILE}: not a regular file")
        return fd

    @property
    def active(self) -> bool:
        return self._fd >= 0

    def emit(self, record: logging.LogRecord) -> None:
        if self._fd < 0:
            return
        try:
            data = (self.format(record) + "\n").encode("utf-8", "replace")
            if os.fstat(self._fd).st_size + len(data) > self.cap:
                self._rotate()
            write_all(self._fd, data)
        except Exception as exc:  # the copy must never fail init: one warning, then off
            self.disable(exc)

    def _rotate(self) -> None:
        mine = os.fstat(self._fd)
        try:
            current: os.stat_result | None = os.lstat(LOG_FILE, dir_fd=self._dir_fd)
        except FileNotFoundError:
            current = None
        # A forked child of init (or the next init) that rotated first left a new file at the name:
        # reopen that one instead of rotating it away.
        if current is not None and (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino):
            os.replace(LOG_FILE, ROTATED_LOG_FILE, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)
        os.close(self._fd)
        self._fd = -1
        self._fd = self._open_file()

    def disable(self, exc: BaseException) -> None:
        reason = exc.message if isinstance(exc, DriverContainerError) else str(exc)
        out = self._stderr or sys.stderr
        with contextlib.suppress(OSError, ValueError):  # stderr closed: nothing more to do
            out.write(f"nvidia-driver: warning: not keeping a copy of the log in {self.run_dir / LOG_FILE}: {reason}\n")
        self.close()

    def close(self) -> None:
        for fd in (self._fd, self._dir_fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._dir_fd = -1
        super().close()


def keep_log(run_dir: Path, *, cap: int = LOG_CAP, stderr: TextIO | None = None) -> RunDirLog | None:
    """Add the RUN_DIR copy to the root logger (its level and records as the stderr handler's); None,
    after one warning, when RUN_DIR or the file cannot be opened."""
    handler = RunDirLog(run_dir, cap=cap, stderr=stderr)
    try:
        handler.open()
    except (OSError, DriverContainerError) as exc:
        handler.disable(exc)
        return None
    logging.getLogger().addHandler(handler)
    return handler
