"""/proc/<pid>/mountinfo (proc(5)): the mount points, for finding mounts left on DRIVER_ROOT."""

from __future__ import annotations

import re

from driver_container.numbers import parse_uint

# The kernel writes space, tab, newline and backslash in paths as \ooo (fs/proc_namespace.c, mangle()).
_OCTAL = re.compile(r"\\([0-7]{3})")


def parse_mount_points(mountinfo: str) -> list[str]:
    """Mount points (field 5), in file order, with the kernel's \\ooo escapes undone."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) >= 5:
            points.append(_OCTAL.sub(lambda m: chr(parse_uint(m.group(1), base=8) or 0), fields[4]))
    return points


def mounts_at_or_below(mountinfo: str, path: str) -> tuple[str, ...]:
    """Mount points equal to ``path`` or below it."""
    top = path.rstrip("/") or "/"
    return tuple(p for p in parse_mount_points(mountinfo) if p == top or p.startswith(top + "/"))
