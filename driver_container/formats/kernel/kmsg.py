"""``/dev/kmsg`` records (pure): parse, keep the NVIDIA driver's, render as dmesg lines.

Record format (torvalds/linux Documentation/ABI/testing/dev-kmsg @ 07c7b547a79605f1041d55b84d91a4a4d9c5b363):
``<prefix>,<seq>,<usec>,<flags>[,more];<text>\\n``, where prefix = facility << 3 | level; further
comma-separated header fields may follow and are ignored; lines starting with a space are continuation
lines (``KEY=value`` context of the record above) and are dropped here. Non-printable bytes and ``\\``
arrive escaped by the kernel as ``\\xNN``, so a record's text is ASCII-safe as read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from driver_container.formats.numbers import parse_uint

# What the NVIDIA kernel modules print: "NVRM: ..." (nvidia.ko, Xid lines included), "nvidia-uvm: ...",
# "nvidia-modeset: ...", "[drm] ... nvidia-drm", "nvidia-nvswitch0: ...", and the kernel's own lines
# about them ("nvidia: loading out-of-tree module taints kernel", module signature, firmware loads).
NVIDIA_TEXT = re.compile(r"NVRM|nvidia|nvswitch", re.IGNORECASE)
# The kernel's copies of its command line (torvalds/linux init/main.c ``start_kernel`` and
# ``print_unknown_bootoptions``, arch/x86/kernel/setup.c ``setup_arch``): kept whatever they name, for
# the NVIDIA modules' and the firmware loader's arguments; formats/redact.py reduces them to those.
COMMAND_LINE_TEXT = re.compile(r"(?:Kernel command line|Command line): |Unknown kernel command line parameters ")


@dataclass(frozen=True, slots=True)
class KernelMessage:
    priority: int  # facility << 3 | level
    sequence: int
    usec: int  # monotonic time stamp, microseconds since boot
    text: str


def parse_record_line(line: bytes) -> KernelMessage | None:
    """One record's first line; None for a continuation line or one without the header's shape."""
    if not line or line.startswith(b" "):
        return None
    header, sep, text = line.partition(b";")
    fields = header.split(b",", 3)
    # parse_uint: at most 20 ASCII digits (a u64); int() of thousands of digits raised ValueError.
    numbers = [parse_uint(f.decode("ascii", "replace")) for f in fields[:3]]
    if not sep or len(numbers) < 3 or None in numbers:
        return None
    priority, sequence, usec = numbers
    assert priority is not None and sequence is not None and usec is not None
    return KernelMessage(priority, sequence, usec, text.decode("utf-8", "replace"))


def parse_kmsg(data: bytes) -> tuple[list[KernelMessage], int]:
    """The records in ``data`` (whole reads of /dev/kmsg, concatenated), and how many non-empty,
    non-continuation lines did not parse."""
    messages: list[KernelMessage] = []
    malformed = 0
    for line in data.split(b"\n"):
        message = parse_record_line(line)
        if message is not None:
            messages.append(message)
        elif line and not line.startswith(b" "):
            malformed += 1
    return messages, malformed


def nvidia_messages(messages: list[KernelMessage]) -> list[KernelMessage]:
    return [m for m in messages if NVIDIA_TEXT.search(m.text) or COMMAND_LINE_TEXT.match(m.text)]


def render_dmesg(messages: list[KernelMessage]) -> str:
    """``dmesg``-like lines: ``[seconds.micros] <level> text``."""
    return "".join(
        f"[{m.usec // 1_000_000:5d}.{m.usec % 1_000_000:06d}] <{m.priority & 7}> {m.text}\n" for m in messages
    )
