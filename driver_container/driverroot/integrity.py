"""Check DRIVER_ROOT against its manifest: each file's content (sha256), size and mode, each link's target.

The manifest's digests come from the image's index (``publish.index``) or from hashing while copying;
this is where they are checked against what consumers really load: ``status --verify`` on demand, and
``init`` once after ``Ready`` in a low-priority child (``check_integrity_and_record``; the outcome is kept in
RUN_DIR for ``status``). Files are read through directory descriptors (``dirtree.Tree``: no link followed
on the way), opened ``O_NOFOLLOW|O_NONBLOCK``, checked to be regular and read no further than their
recorded size, so a file replaced by a link, a FIFO or a growing file is a finding, never a hang. A size
that differs from the record is a finding without reading the file, and the whole check has a budget
(``IntegrityBudget``: bytes hashed and seconds): past it the check stops with what it found so far and
says where it stopped (``IntegrityReport.stopped``), so a root grown to many GiB (a sparse file with
its record edited to match) cannot hold ``status --verify`` or ``bug-report``. The seconds may be what is
left of a caller's ``Deadline`` (``status --verify``: one 10 s for the root's proof and the hashing).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from driver_container.base.errors import DriverContainerError, HostReadError, PublishError
from driver_container.base.paths import HostPaths
from driver_container.driverroot.manifest import Record, read_manifest
from driver_container.formats.boundedjson import decode_object
from driver_container.runtime import statusfiles
from driver_container.runtime.deadline import Deadline
from driver_container.runtime.dirtree import Tree
from driver_container.runtime.fsutil import open_regular

log = logging.getLogger(__name__)

MAX_LISTED = 50  # mismatches kept in the RUN_DIR record (the count is always exact)
# The budget of one check. The largest root published here is ~0.8 GB (the 535 userspace with the graphics
# libraries, docs/development.md; the image's own payload is 228 MB, docs/image.md): 4 GiB is 5 times
# that, hashed in ~4 s at the ~1 GB/s sha256 runs at. 10 s is the bound every input is handled within
# (README); DRIVER_ROOT is a tmpfs on Talos, read at memory speed. The check after Ready runs at nice 19
# and SCHED_IDLE, where time measures the node's load more than the root: it gets 600 s.
VERIFY_MAX_BYTES = 4 << 30
VERIFY_MAX_S = 10.0
AFTER_READY_MAX_S = 600.0
_CHUNK = 1 << 20  # bytes read (and hashed) between two looks at the clock


@dataclass(frozen=True)
class IntegrityBudget:
    max_bytes: int = VERIFY_MAX_BYTES
    max_s: float = VERIFY_MAX_S


class _Spent:
    """What a check has used of its budget so far; its time is ``deadline``'s (shared with the caller's
    other steps) or, without one, ``budget.max_s`` from now."""

    def __init__(self, budget: IntegrityBudget, deadline: Deadline | None = None) -> None:
        self.budget = budget
        self.deadline = deadline or Deadline(budget.max_s)
        self.hashed = 0

    def out_of_time(self) -> bool:
        return self.deadline.expired

    def affords(self, size: int) -> bool:
        return self.hashed + size <= self.budget.max_bytes and not self.out_of_time()

    def describe(self) -> str:
        return (
            f"verify stopped after {self.hashed} bytes / {self.deadline.elapsed():.1f} s (budget: "
            f"{self.budget.max_bytes} bytes, {self.deadline.seconds:g} s)"
        )


# What _check_file returns when the budget ran out before its record was checked (compared by identity).
_BUDGET_SPENT = "not checked: the budget is spent"


@dataclass(frozen=True)
class Mismatch:
    path: str  # relative to DRIVER_ROOT
    reason: str  # e.g. "content differs from the manifest", "missing", "a symlink, not a file"


@dataclass(frozen=True)
class IntegrityReport:
    manifest_sha256: str  # of the manifest text checked against ("" when there is none)
    version: str | None
    checked: int
    mismatches: tuple[Mismatch, ...]
    total_mismatches: int = 0  # may exceed len(mismatches) in a record (MAX_LISTED)
    stopped: str = field(default="")  # where the budget ended the check ("": every record checked)

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.total_mismatches


def _check_file(tree: Tree, rec: Record, spent: _Spent) -> str | None:
    rel = PurePosixPath(rec.path)
    try:
        fd_dir = tree.dir_fd(rel.parent)
    except PublishError as exc:  # EMFILE, EIO: the check could not look, which is not "missing"
        return exc.message
    st = tree.lstat(rel) if fd_dir is not None else None
    if st is None:
        return "missing"
    if not stat.S_ISREG(st.st_mode):
        return f"a {_kind(st)}, not a file"
    if st.st_size != rec.size:  # before opening, let alone hashing: a 20 GiB file is not read
        return f"{st.st_size} bytes, not {rec.size}"
    if not spent.affords(rec.size):
        return _BUDGET_SPENT
    try:
        fd, st = open_regular(rel.name, shown=rec.path, dir_fd=fd_dir)
    except PublishError as exc:
        return exc.message
    try:
        return _check_content(fd, st, rec, spent)
    except OSError as exc:
        return f"cannot read: {exc.strerror}"
    finally:
        os.close(fd)


def _check_content(fd: int, st: os.stat_result, rec: Record, spent: _Spent) -> str | None:
    if st.st_size != rec.size:
        return f"{st.st_size} bytes, not {rec.size}"
    digested = _digest_within(fd, rec.size, spent)
    if digested is None:
        return _BUDGET_SPENT
    digest, size = digested
    if size > rec.size:
        return f"grew past its {rec.size} bytes while read"
    if size != rec.size:
        return f"shrank to {size} bytes while read"
    if digest != rec.sha256:
        return "content differs from the manifest (sha256)"
    if stat.S_IMODE(st.st_mode) != rec.mode:
        return f"mode {stat.S_IMODE(st.st_mode):04o}, not {rec.mode:04o}"
    return None


def _digest_within(fd: int, size: int, spent: _Spent) -> tuple[str, int] | None:
    """(sha256, bytes read) of at most ``size`` + 1 bytes (one more: a file that grew), a look at the clock
    every ``_CHUNK``; None when the time runs out (a file on slow storage, or hashed on a busy CPU)."""
    digest = hashlib.sha256()
    buffer = bytearray(min(_CHUNK, size + 1))
    view = memoryview(buffer)
    total = 0
    while total <= size:
        if spent.out_of_time():
            return None
        got = os.readv(fd, [view[: min(len(buffer), size + 1 - total)]])
        if not got:
            break
        digest.update(view[:got])
        total += got
        spent.hashed += got
    return digest.hexdigest(), total


def _check_link(tree: Tree, rec: Record) -> str | None:
    st = tree.lstat(PurePosixPath(rec.path))
    if st is None:
        return "missing"
    if not stat.S_ISLNK(st.st_mode):
        return f"a {_kind(st)}, not a link"
    target = tree.readlink(PurePosixPath(rec.path))
    return None if target == rec.target else f"links to {target!r}, not {rec.target!r}"


def _check_dir(tree: Tree, rec: Record) -> str | None:
    st = tree.lstat(PurePosixPath(rec.path))
    if st is None:
        return "missing"
    return None if stat.S_ISDIR(st.st_mode) else f"a {_kind(st)}, not a directory"


_CHECKS = {"link": _check_link, "dir": _check_dir}


def _kind(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    return "file" if stat.S_ISREG(st.st_mode) else "special file"


def check_integrity(
    root: Path, budget: IntegrityBudget | None = None, deadline: Deadline | None = None
) -> IntegrityReport:
    """Every record of ROOT's manifest against the file or link at its path (reads only), within ``budget``
    (by default ``VERIFY_MAX_BYTES`` and ``VERIFY_MAX_S``) and, where given, what is left of ``deadline``
    in place of ``budget.max_s``: past either the records left are not checked."""
    text, manifest = read_manifest(root)
    if manifest is None:
        return IntegrityReport("", None, 0, ())
    spent = _Spent(budget or IntegrityBudget(), deadline)
    tree = Tree(root)
    mismatches = []
    checked, stopped = 0, ""
    try:
        for rec in manifest.records:
            reason = _check_file(tree, rec, spent) if rec.type == "file" else _CHECKS[rec.type](tree, rec)
            if reason is _BUDGET_SPENT:
                total = len(manifest.records)
                stopped = f"{spent.describe()}: {total - checked} of {total} paths not checked"
                break
            checked += 1
            if reason is not None:
                mismatches.append(Mismatch(rec.path, reason))
    finally:
        tree.close()
    digest = hashlib.sha256(text.encode()).hexdigest()
    return IntegrityReport(digest, manifest.version, checked, tuple(mismatches), len(mismatches), stopped)


def report_json(report: IntegrityReport) -> dict[str, Any]:
    return {
        "manifest_sha256": report.manifest_sha256,
        "version": report.version,
        "checked": report.checked,
        "mismatches": [{"path": m.path, "reason": m.reason} for m in report.mismatches[:MAX_LISTED]],
        "total_mismatches": max(report.total_mismatches, len(report.mismatches)),
        "stopped": report.stopped,
    }


def parse_report(text: str) -> IntegrityReport | None:
    """The record ``check_integrity_and_record`` wrote; None when it is not one (pure)."""
    try:
        body = decode_object(text, limit=statusfiles.MAX_VERIFY_RECORD)
        listed = tuple(Mismatch(str(m["path"]), str(m["reason"])) for m in body["mismatches"][:MAX_LISTED])
        total = body["total_mismatches"]
        version = body["version"]
        if not isinstance(total, int) or not isinstance(body["checked"], int) or total < len(listed):
            return None
        return IntegrityReport(
            str(body["manifest_sha256"]),
            None if version is None else str(version),
            body["checked"],
            listed,
            total,
            str(body.get("stopped") or ""),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def check_integrity_and_record(paths: HostPaths) -> IntegrityReport:
    """Verify DRIVER_ROOT, log the outcome (an error on a mismatch) and record it in RUN_DIR for ``status``."""
    report = check_integrity(paths.driver_root, IntegrityBudget(max_s=AFTER_READY_MAX_S))
    statusfiles.write_integrity_record(paths, json.dumps(report_json(report)) + "\n")
    if report.stopped:
        log.warning("%s: %s", paths.driver_root, report.stopped)
    elif report.ok:
        log.info("verified %s: %d published paths match the manifest", paths.driver_root, report.checked)
    if not report.ok:
        shown = "; ".join(f"{m.path}: {m.reason}" for m in report.mismatches[:10])
        log.error(
            "%s: %d of %d published paths differ from the manifest (changed behind our back): %s",
            paths.driver_root,
            report.total_mismatches,
            report.checked,
            shown,
        )
    return report


def last_integrity_check(paths: HostPaths) -> IntegrityReport | None:
    """The recorded outcome of the check after ``Ready``, if it was made against the manifest now in
    DRIVER_ROOT (a later publish makes it stale); None otherwise."""
    try:
        text = statusfiles.read_integrity_record(paths)
    except (HostReadError, DriverContainerError):
        return None
    report = parse_report(text) if text else None
    if report is None:
        if text:  # damaged: as if absent; the next check after Ready rewrites it
            log.warning("%s: ignored, not a record this version wrote", paths.integrity_file)
        return None
    current, _manifest = read_manifest(paths.driver_root)
    if not current or hashlib.sha256(current.encode()).hexdigest() != report.manifest_sha256:
        return None
    return report
