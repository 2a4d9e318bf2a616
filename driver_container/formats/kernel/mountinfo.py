"""/proc/<pid>/mountinfo (proc(5)): the mounts of this mount namespace, for DRIVER_ROOT's own mount and
the mounts left on it.

A line is ``ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS``
(fs/proc_namespace.c, show_mountinfo()). OPTIONS are the per-mount flags (``noexec``, ``nodev`` and
``nosuid`` live here, MNT_NOEXEC etc.); SUPER_OPTIONS belong to the filesystem (``mode=755``).
"""

from __future__ import annotations

import re

from driver_container.base.records import NamedRecord
from driver_container.formats.numbers import parse_uint

# The kernel writes space, tab, newline and backslash in paths as \ooo (fs/proc_namespace.c, mangle()).
_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(parse_uint(m.group(1), base=8) or 0), field) if "\\" in field else field


class Mount(NamedRecord):
    """One mountinfo line."""

    mount_id: int
    parent_id: int
    root: str  # the directory of the filesystem mounted here ("/" unless a bind of a subdirectory)
    mount_point: str
    options: tuple[str, ...]  # per-mount: rw|ro, nosuid, nodev, noexec, relatime...
    propagation: tuple[str, ...]  # optional fields: shared:N, master:N, propagate_from:N, unbindable
    fstype: str
    source: str
    super_options: tuple[str, ...]

    @property
    def shared(self) -> bool:
        """Whether mounts made below it propagate to its peers (the host, for a Bidirectional hostPath)."""
        return any(p.startswith("shared:") for p in self.propagation)

    def has(self, option: str) -> bool:
        return option in self.options


def parse_line(line: str) -> Mount | None:
    """One line; None for a malformed one (too few fields, no ``-`` separator, non-numeric ids)."""
    fields = line.split()
    try:
        dash = fields.index("-", 6)
        ids = (int(fields[0]), int(fields[1]))
    except ValueError:
        return None
    if len(fields) < dash + 3:
        return None
    return Mount(
        mount_id=ids[0],
        parent_id=ids[1],
        root=_unescape(fields[3]),
        mount_point=_unescape(fields[4]),
        options=tuple(fields[5].split(",")),
        propagation=tuple(fields[6:dash]),
        fstype=fields[dash + 1],
        source=_unescape(fields[dash + 2]),
        super_options=tuple(fields[dash + 3].split(",")) if len(fields) > dash + 3 else (),
    )


def parse_mountinfo(mountinfo: str) -> list[Mount]:
    """Every well-formed line, in file order (the kernel lists a namespace's mounts in mount order)."""
    return [m for m in map(parse_line, mountinfo.splitlines()) if m is not None]


def parse_mount_points(mountinfo: str) -> list[str]:
    """Mount points (field 5), in file order, with the kernel's \\ooo escapes undone."""
    points = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) >= 5:
            points.append(_unescape(fields[4]))
    return points


def _is_at_or_below(point: str, top: str) -> bool:
    return point == top or point.startswith(top.rstrip("/") + "/")


def mounts_at_or_below(mountinfo: str, path: str) -> tuple[str, ...]:
    """Mount points equal to ``path`` or below it."""
    top = path.rstrip("/") or "/"
    return tuple(p for p in parse_mount_points(mountinfo) if _is_at_or_below(p, top))


def top_mount_at(mounts: list[Mount], point: str) -> Mount | None:
    """The visible one of the mounts stacked on ``point``: the one no other mount there sits on."""
    stack = [m for m in mounts if m.mount_point == point]
    below = {m.parent_id for m in stack}
    on_top = [m for m in stack if m.mount_id not in below] or stack
    return on_top[-1] if on_top else None


def mount_containing(mounts: list[Mount], path: str) -> Mount | None:
    """The mount that holds ``path`` (an absolute, resolved path): the longest mount point above it."""
    path = path.rstrip("/") or "/"
    best = max((m.mount_point for m in mounts if _is_at_or_below(path, m.mount_point)), key=len, default=None)
    return None if best is None else top_mount_at(mounts, best)
