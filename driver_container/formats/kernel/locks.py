"""Pure parser of ``/proc/locks``: the granted locks and who took them.

Format (Linux fs/locks.c ``lock_get_status``, torvalds/linux @ v6.12): one line per lock,
``<id>: <FLOCK|POSIX|OFDLCK|...> <ADVISORY|MANDATORY> <READ|WRITE> <pid> <major>:<minor>:<inode> <start> <end>``,
the device in hex (``%02x:%02x``, the superblock's ``s_dev``), the inode in decimal; a process waiting for
a lock is listed after it with ``->`` before its class. The pid is the locker's in the reader's pid
namespace: 0 when it is not visible there (or has ended), -1 for an open-file-description lock.
Text in, frozen data out; lines that do not match are skipped, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from driver_container.formats.numbers import parse_int, parse_uint


@dataclass(frozen=True, slots=True)
class FileLock:
    """One granted lock: its class (``FLOCK``, ``POSIX``, ``OFDLCK``...), the locker's pid (None when the
    kernel shows none: 0 or -1) and the file's device numbers and inode."""

    kind: str
    pid: int | None
    major: int
    minor: int
    inode: int


def _file_id(field: str) -> tuple[int, int, int] | None:
    parts = field.split(":")
    if len(parts) != 3:
        return None
    major, minor, inode = parse_uint(parts[0], base=16), parse_uint(parts[1], base=16), parse_uint(parts[2])
    return None if major is None or minor is None or inode is None else (major, minor, inode)


def parse_locks(text: str) -> tuple[FileLock, ...]:
    """The granted locks of ``/proc/locks`` (waiters left out), in the kernel's order."""
    locks: list[FileLock] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8 or not fields[0].endswith(":") or fields[1] == "->":
            continue
        file_id, pid = _file_id(fields[5]), parse_int(fields[4])
        if file_id is None or pid is None:
            continue
        locks.append(FileLock(fields[1], pid if pid > 0 else None, *file_id))
    return tuple(locks)
