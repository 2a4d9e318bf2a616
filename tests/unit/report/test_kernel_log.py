"""The kernel log member: /dev/kmsg's record format, the NVIDIA filter, and the reader's bounds on
stand-ins for the device (a regular file, a FIFO), never the machine's own /dev/kmsg."""

from __future__ import annotations

import os
import time
from pathlib import Path

from helpers.support import require

from driver_container.formats.kernel.kmsg import nvidia_messages, parse_kmsg, render_dmesg
from driver_container.report.kernel_log import RAW_CAP, read_kernel_log
from driver_container.runtime.timedchild import OK, run_until

# Records in the shape of torvalds/linux Documentation/ABI/testing/dev-kmsg (its example lines, plus
# NVIDIA driver lines as nvidia.ko prints them: "NVRM: ..." and an Xid).
RECORDS = (
    b"7,160,424069,-;pci_root PNP0A03:00: host bridge window [io  0x0000-0x0cf7] (ignored)\n"
    b" SUBSYSTEM=acpi\n"
    b" DEVICE=+acpi:PNP0A03:00\n"
    b"4,1200,5140900,-;nvidia: loading out-of-tree module taints kernel.\n"
    b"6,1201,5690716,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  595.91.07\n"
    b"30,1202,5690999,-;udevd[80]: starting version 181\n"
    b"3,1203,9000000,c;NVRM: Xid (PCI:0000:01:00): 79, pid=1234, GPU has fallen off the bus.\n"
)


def test_records_parse_and_only_nvidia_lines_are_kept() -> None:
    messages, malformed = parse_kmsg(RECORDS + b"garbage without a header\n")
    assert [m.sequence for m in messages] == [160, 1200, 1201, 1202, 1203]
    assert malformed == 1
    kept = nvidia_messages(messages)
    assert [m.sequence for m in kept] == [1200, 1201, 1203]
    text = render_dmesg(kept)
    xid = "[    9.000000] <3> NVRM: Xid (PCI:0000:01:00): 79, pid=1234, GPU has fallen off the bus."
    assert text.splitlines()[2] == xid
    assert "udevd" not in text and "SUBSYSTEM" not in text


def test_a_regular_file_stands_in_for_the_device(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(RECORDS)
    member = read_kernel_log(kmsg, time.monotonic() + 5)
    assert member.data is not None and member.note == ""
    lines = member.data.decode().splitlines()
    assert lines[0].startswith("# 3 NVIDIA messages of 5 kernel records")
    assert len(lines) == 4 and "Xid" in lines[3]


def test_a_fifo_with_a_silent_writer_ends_at_once(tmp_path: Path) -> None:
    """The device's end of buffer is EAGAIN under O_NONBLOCK: a FIFO held open by a writer that never
    writes behaves alike, and must not block the report."""
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so the writer's open does not block
    writer = os.open(fifo, os.O_WRONLY)
    try:
        os.write(writer, RECORDS)
        started = time.monotonic()
        member = read_kernel_log(fifo, time.monotonic() + 30)
        assert time.monotonic() - started < 2
        assert member.data is not None and b"Xid" in member.data
        assert member.note == ""  # EAGAIN is the end of the buffer, not an error
    finally:
        os.close(writer)
        os.close(reader)


def test_absent_device_and_a_directory_are_recorded(tmp_path: Path) -> None:
    assert read_kernel_log(tmp_path / "none", time.monotonic() + 5).note == "absent"
    member = read_kernel_log(tmp_path, time.monotonic() + 5)
    assert member.data is None and "not a character device" in member.note


def test_a_symlink_at_the_device_path_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(RECORDS)
    (tmp_path / "kmsg").symlink_to(tmp_path / "real")
    member = read_kernel_log(tmp_path / "kmsg", time.monotonic() + 5)
    assert member.data is None and member.note.startswith("not readable")


def test_no_permission_is_recorded_not_raised(tmp_path: Path) -> None:
    """EPERM/EACCES at open (kernel.dmesg_restrict=1 without CAP_SYSLOG) is a note: read as nobody, in a
    forked child that dropped root."""
    require(os.geteuid() == 0, "root (to read as another user)")
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(RECORDS)
    kmsg.chmod(0o600)

    def as_nobody() -> tuple[bool, str]:
        os.setgid(65534)
        os.setuid(65534)
        member = read_kernel_log(kmsg, time.monotonic() + 5)
        return member.data is None, member.note

    kind, (left_out, note) = run_until(as_nobody, 30)
    assert kind == OK and left_out
    assert note.startswith("not readable: Permission denied (kernel.dmesg_restrict=1"), note


def test_an_endless_device_stops_at_the_deadline_or_the_byte_cap() -> None:
    """A character device that never ends (a hostile KMSG_PATH: /dev/zero) is not read for ever."""
    require(Path("/dev/zero").exists(), "/dev/zero")
    assert read_kernel_log("/dev/zero", time.monotonic()).note == "stopped at the report's deadline"
    started = time.monotonic()
    member = read_kernel_log("/dev/zero", time.monotonic() + 60)
    assert time.monotonic() - started < 30
    assert member.note.startswith(f"stopped after {RAW_CAP} bytes of records")
