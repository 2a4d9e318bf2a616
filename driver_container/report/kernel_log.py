"""The kernel's NVIDIA messages, read from ``HostPaths.kmsg_path`` (/dev/kmsg; a fixture in tests).

/dev/kmsg semantics (torvalds/linux Documentation/ABI/testing/dev-kmsg @ 07c7b547a79605f1041d55b84d91a4a4d9c5b363,
kernel/printk/printk.c @ 002eb6ad075142e5940122c7fcee71cf1e906e29): a fresh open starts at the oldest
record in the ring buffer and reading changes nothing for anyone else; each read() returns one whole record
(EINVAL when the buffer is smaller than the record: ours is larger than the kernel's own record buffer);
with O_NONBLOCK the end of the buffer is EAGAIN; EPIPE means records were overwritten while read (the
position moves on; reading continues); open() fails with EPERM when ``kernel.dmesg_restrict=1`` and the
reader lacks CAP_SYSLOG (``check_syslog_permissions``), which is recorded, not raised. A regular file or a
FIFO stands in for the device in tests: EOF ends it the same way.
"""

from __future__ import annotations

import errno
import os
import time

from driver_container.base.fileread import kind_of, open_nofollow
from driver_container.formats.kernel.kmsg import nvidia_messages, parse_kmsg, render_dmesg
from driver_container.report.model import ABSENT, Member, missing

KMSG_NAME = "kernel/nvidia-messages.txt"
READ_SIZE = 16 << 10  # > the kernel's per-reader record buffer (8 KiB CONSOLE_EXT_LOG_MAX, 2 KiB since 6.x)
RAW_CAP = 32 << 20  # read no more of the ring buffer than this (log_buf_len is 128 KiB-32 MiB)
LOG_KINDS = ("a character device", "a regular file", "a FIFO")  # the device, or its stand-ins in tests


def read_kernel_log(path: os.PathLike[str] | str, deadline: float) -> Member:
    """The NVIDIA records of the ring buffer as dmesg lines (monotonic ``deadline``: time.monotonic())."""
    source = os.fspath(path)
    try:
        fd = open_nofollow(path)
    except FileNotFoundError:
        return missing(KMSG_NAME, source, ABSENT)
    except OSError as exc:
        hint = " (kernel.dmesg_restrict=1 and no CAP_SYSLOG?)" if exc.errno in (errno.EPERM, errno.EACCES) else ""
        return missing(KMSG_NAME, source, f"not readable: {exc.strerror}{hint}")
    try:
        if kind_of(fd) not in LOG_KINDS:
            return missing(KMSG_NAME, source, "not read: not a character device")
        raw, lost, why = _read_records(fd, deadline)
    finally:
        os.close(fd)
    messages, malformed = parse_kmsg(raw)
    kept = nvidia_messages(messages)
    notes = [why] if why else []
    if lost:
        notes.append(f"records overwritten while read ({lost} times)")
    if malformed:
        notes.append(f"{malformed} lines not in the record format")
    head = f"# {len(kept)} NVIDIA messages of {len(messages)} kernel records read from {source}\n"
    return Member(KMSG_NAME, source, (head + render_dmesg(kept)).encode(), "; ".join(notes))


def _read_records(fd: int, deadline: float) -> tuple[bytes, int, str]:
    """(the records read, how many EPIPEs, why it stopped early or "")."""
    chunks: list[bytes] = []
    size = lost = 0
    while True:
        if time.monotonic() >= deadline:
            return b"".join(chunks), lost, "stopped at the report's deadline"
        if size >= RAW_CAP:
            return b"".join(chunks), lost, f"stopped after {RAW_CAP} bytes of records"
        try:
            chunk = os.read(fd, READ_SIZE)
        except BlockingIOError:  # EAGAIN: the end of the buffer (or a FIFO with no data)
            break
        except BrokenPipeError:  # EPIPE: overwritten while read; the position moved to the next record
            lost += 1
            continue
        except OSError as exc:
            return b"".join(chunks), lost, f"read stopped: {exc.strerror}"
        if not chunk:
            break
        # /dev/kmsg returns one record per read, ending in "\n"; a file returns any run of bytes.
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), lost, ""
