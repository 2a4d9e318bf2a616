"""A report's members and its bounds: the whole run's deadline, the archive's byte budget, each member's cap.

A ``Member`` is one file of the archive, or one that is not there and why (``note``): every one is listed
in the index with where it came from. ``Budget.admit`` is the one place a member is cut: to its own cap
and to what is left of the archive's, keeping its start (or, for a log, its end), and the note says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from driver_container.formats.redact import redact
from driver_container.runtime.deadline import Deadline

DEFAULT_TOTAL_CAP = 8 << 20  # bytes of members, uncompressed; the archive is smaller
DEFAULT_DEADLINE_S = 60.0
ABSENT = "absent"
# Read past a member's limit before redaction: a secret cut at the limit is still seen whole.
REDACT_MARGIN = 64 << 10


@dataclass(frozen=True, slots=True)
class Member:
    """``name``: its path in the archive; ``source``: where it came from (a path, a command, a step);
    ``data``: None when left out; ``note``: why it is left out or cut ("" when whole)."""

    name: str
    source: str
    data: bytes | None
    note: str = ""
    redactions: int = 0


def missing(name: str, source: str, why: str) -> Member:
    return Member(name, source, None, why)


class Budget:
    """The run's deadline and the archive's remaining bytes (mutable: one per run)."""

    def __init__(self, total_cap: int = DEFAULT_TOTAL_CAP, deadline_s: float = DEFAULT_DEADLINE_S) -> None:
        self.total_cap = total_cap
        self.bytes_left = total_cap
        self.deadline_s = deadline_s
        self.deadline = Deadline(deadline_s)
        self.end = self.deadline.end

    def time_left(self) -> float:
        return self.deadline.left()

    @property
    def expired(self) -> bool:
        return self.deadline.expired

    def admit(self, member: Member, cap: int, *, keep_end: bool = False) -> Member:
        """``member`` cut to ``cap`` and to the bytes left, redacted; charges what it keeps.

        Redaction costs time in proportion to its input, so a member is first cut to the part that can
        be kept plus ``REDACT_MARGIN`` (at a line's edge: no secret is split from the name that marks
        it), redacted, then cut to its limit."""
        if member.data is None:
            return member
        limit = min(cap, self.bytes_left)
        kept = _near_limit(member.data, limit, keep_end=keep_end)
        data, redactions = redact(kept)
        note = member.note
        if len(data) > limit or len(kept) < len(member.data):
            cut = f"truncated at {limit} bytes"
            cut += " (the archive's size cap)" if limit < cap else ""
            cut += ", the oldest left out" if keep_end else ""
            data = data[len(data) - limit :] if keep_end else data[:limit]
            note = f"{note}; {cut}" if note else cut
        self.bytes_left -= len(data)
        return replace(member, data=data, note=note, redactions=member.redactions + redactions)


def _near_limit(data: bytes, limit: int, *, keep_end: bool) -> bytes:
    """``data`` cut to at most ``limit`` + ``REDACT_MARGIN`` bytes, at a line's (or else a word's) edge
    in the margin: what is kept of a value is then seen whole by ``redact``."""
    if len(data) <= limit + REDACT_MARGIN:
        return data
    if keep_end:
        part = data[len(data) - limit - REDACT_MARGIN :]
        return part[_edge(part, 0, REDACT_MARGIN) :]
    part = data[: limit + REDACT_MARGIN]
    return part[: _edge(part, limit, len(part))]


def _edge(data: bytes, start: int, stop: int) -> int:
    """Where the first line (or else word) in ``data[start:stop]`` begins; ``stop`` when none does."""
    for edge in (b"\n", b" "):
        at = data.find(edge, start, stop)
        if at >= 0:
            return at + 1
    return stop
