"""The /proc/locks parser: granted locks with their pid and file, waiters and odd lines left out."""

from __future__ import annotations

from driver_container.formats.kernel.locks import FileLock, parse_locks

# As fs/locks.c lock_get_status prints them (an flock, a POSIX lock, an OFD lock and a waiter behind one).
LOCKS = """\
1: FLOCK  ADVISORY  WRITE 4242 00:1a:1234 0 EOF
1: -> FLOCK  ADVISORY  WRITE 4343 00:1a:1234 0 EOF
2: POSIX  ADVISORY  READ 77 fe:00:260072 0 EOF
3: OFDLCK ADVISORY  WRITE -1 00:1a:99 0 EOF
4: FLOCK  ADVISORY  WRITE 0 00:1a:98 0 EOF
garbage line
5: FLOCK  ADVISORY  WRITE x 00:1a:97 0 EOF
"""


def test_granted_locks_with_pid_device_and_inode() -> None:
    assert parse_locks(LOCKS) == (
        FileLock("FLOCK", 4242, 0, 0x1A, 1234),
        FileLock("POSIX", 77, 0xFE, 0, 260072),
        FileLock("OFDLCK", None, 0, 0x1A, 99),
        FileLock("FLOCK", None, 0, 0x1A, 98),
    )


def test_nothing_locked() -> None:
    assert parse_locks("") == ()
