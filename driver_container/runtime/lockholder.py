"""Who holds the pid-file lock: the locker's pid from ``/proc/locks``, its program from ``/proc/PID/cmdline``.
Imported only when the lock is held (lock.py): never on an unchanged restart.

Both are read under the host's procfs root (``HostPaths.proc``, ``PROCFS_ROOT``): the driver pod runs with
hostPID (NVIDIA/gpu-operator manifests/state-driver/0500_daemonset.yaml), so every locker is visible there.
``/proc/locks`` names a lock's file by the superblock's device and the inode; on an overlay or a btrfs
subvolume ``fstat`` reports another device for the same file, so a lock on our inode number is taken as
ours when no lock matches device and inode both.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

from driver_container.base.errors import HostReadError
from driver_container.base.resolver import Root
from driver_container.formats.kernel.locks import FileLock, parse_locks

PROGRAM = "nvidia-driver"  # the console script (pyproject.toml [project.scripts]); ``-m driver_container`` too
MODULE = b"driver_container"
LOCKS_LIMIT = 8 << 20  # ~60 bytes a lock: 100 000 locks
CMDLINE_LIMIT = 4 << 20  # longer than any argv the kernel starts (ARG_MAX is a quarter of an 8 MiB stack)
SHOWN = 160  # characters of a command line in a message


@dataclass(frozen=True, slots=True)
class Holder:
    """A process holding the lock: ``ours`` True (this program), False (another), None (cannot tell)."""

    pid: int | None
    command: str | None
    ours: bool | None

    def describe(self) -> str:
        pid = f"pid {self.pid}" if self.pid is not None else "a process /proc/locks shows no pid for"
        return f"{pid} ({self.command})" if self.command else pid


def lock_holders(proc: Root, fd: int) -> tuple[Holder, ...]:
    """The processes holding a lock on ``fd``'s file; empty when ``/proc/locks`` names none (or is unreadable)."""
    try:
        locks = parse_locks(proc.read_text("locks", limit=LOCKS_LIMIT))
    except HostReadError:
        return ()
    st = os.fstat(fd)
    exact = [lock for lock in locks if (lock.major, lock.minor, lock.inode) == (*_device(st), st.st_ino)]
    mine = exact or [lock for lock in locks if lock.inode == st.st_ino]
    return tuple(_holder(proc, lock) for lock in mine)


def _device(st: os.stat_result) -> tuple[int, int]:
    return os.major(st.st_dev), os.minor(st.st_dev)


def _holder(proc: Root, lock: FileLock) -> Holder:
    if lock.pid is None:
        return Holder(None, None, None)
    try:
        cmdline = proc.read_bytes(f"{lock.pid}/cmdline", limit=CMDLINE_LIMIT)
    except HostReadError as exc:
        # Gone since (a retry sees the lock gone too) or unreadable: not known to be another program.
        return Holder(lock.pid, None, None if "larger than" not in exc.message else False)
    args = [arg for arg in cmdline.split(b"\0") if arg]
    return Holder(lock.pid, _shown(args), is_this_program(args))


def is_this_program(args: list[bytes]) -> bool:
    """``nvidia-driver ...`` (run directly or by its interpreter) or ``python -m driver_container ...``."""
    if any(os.path.basename(arg) == PROGRAM.encode() for arg in args[:2]):
        return True
    return any(arg == b"-m" and following == MODULE for arg, following in itertools.pairwise(args))


def _shown(args: list[bytes]) -> str:
    text = " ".join(arg.decode("utf-8", errors="replace") for arg in args)
    text = "".join(ch if ch.isprintable() else "?" for ch in text) or "no command line"
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."
