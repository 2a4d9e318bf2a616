"""Check DRIVER_ROOT against its manifest: each file's content (sha256), size and mode, each link's target.

The manifest's digests come from the image's index (``publish.index``) or from hashing while copying;
this is where they are checked against what consumers really load: ``status --verify`` on demand, and
``init`` once after ``Ready`` in a low-priority child (``verify_and_record``; the outcome is kept in
RUN_DIR for ``status``). Files are read through directory descriptors (``dirtree.Tree``: no link followed
on the way), opened ``O_NOFOLLOW|O_NONBLOCK``, checked to be regular and read no further than their
recorded size, so a file replaced by a link, a FIFO or a growing file is a finding, never a hang.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from driver_container.errors import DriverContainerError, HostReadError, PublishError
from driver_container.formats.boundedjson import decode_object
from driver_container.paths import HostPaths
from driver_container.publish.manifest import Record, read_manifest
from driver_container.runtime import statusfiles
from driver_container.runtime.dirtree import Tree
from driver_container.runtime.fsutil import open_regular
from driver_container.runtime.staged import digest_regular

log = logging.getLogger(__name__)

MAX_LISTED = 50  # mismatches kept in the RUN_DIR record (the count is always exact)


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

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.total_mismatches


def _check_file(tree: Tree, rec: Record) -> str | None:
    rel = PurePosixPath(rec.path)
    fd_dir = tree.dir_fd(rel.parent)
    st = tree.lstat(rel) if fd_dir is not None else None
    if st is None:
        return "missing"
    if not stat.S_ISREG(st.st_mode):
        return f"a {_kind(st)}, not a file"
    try:
        fd, st = open_regular(rel.name, shown=rec.path, dir_fd=fd_dir)
    except PublishError as exc:
        return exc.message
    try:
        if st.st_size != rec.size:
            return f"{st.st_size} bytes, not {rec.size}"
        digest, size = digest_regular(fd, rec.size)
    except PublishError:
        return f"grew past its {rec.size} bytes while read"
    except OSError as exc:
        return f"cannot read: {exc.strerror}"
    finally:
        os.close(fd)
    if size != rec.size:
        return f"shrank to {size} bytes while read"
    if digest != rec.sha256:
        return "content differs from the manifest (sha256)"
    if stat.S_IMODE(st.st_mode) != rec.mode:
        return f"mode {stat.S_IMODE(st.st_mode):04o}, not {rec.mode:04o}"
    return None


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


_CHECKS = {"file": _check_file, "link": _check_link, "dir": _check_dir}


def _kind(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    return "file" if stat.S_ISREG(st.st_mode) else "special file"


def verify_published(root: Path) -> IntegrityReport:
    """Every record of ROOT's manifest against the file or link at its path (reads only)."""
    text, manifest = read_manifest(root)
    if manifest is None:
        return IntegrityReport("", None, 0, ())
    tree = Tree(root)
    mismatches = []
    try:
        for rec in manifest.records:
            reason = _CHECKS[rec.type](tree, rec)
            if reason is not None:
                mismatches.append(Mismatch(rec.path, reason))
    finally:
        tree.close()
    digest = hashlib.sha256(text.encode()).hexdigest()
    return IntegrityReport(digest, manifest.version, len(manifest.records), tuple(mismatches), len(mismatches))


def report_json(report: IntegrityReport) -> dict[str, Any]:
    return {
        "manifest_sha256": report.manifest_sha256,
        "version": report.version,
        "checked": report.checked,
        "mismatches": [{"path": m.path, "reason": m.reason} for m in report.mismatches[:MAX_LISTED]],
        "total_mismatches": max(report.total_mismatches, len(report.mismatches)),
    }


def parse_report(text: str) -> IntegrityReport | None:
    """The record ``verify_and_record`` wrote; None when it is not one (pure)."""
    try:
        body = decode_object(text, limit=statusfiles.MAX_VERIFY_RECORD)
        listed = tuple(Mismatch(str(m["path"]), str(m["reason"])) for m in body["mismatches"][:MAX_LISTED])
        total = body["total_mismatches"]
        version = body["version"]
        if not isinstance(total, int) or not isinstance(body["checked"], int) or total < len(listed):
            return None
        return IntegrityReport(str(body["manifest_sha256"]), None if version is None else str(version),
                               body["checked"], listed, total)  # fmt: skip
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def verify_and_record(paths: HostPaths) -> IntegrityReport:
    """Verify DRIVER_ROOT, log the outcome (an error on a mismatch) and record it in RUN_DIR for ``status``."""
    report = verify_published(paths.driver_root)
    statusfiles.write_verify_record(paths, json.dumps(report_json(report)) + "\n")
    if report.ok:
        log.info("verified %s: %d published paths match the manifest", paths.driver_root, report.checked)
    else:
        shown = "; ".join(f"{m.path}: {m.reason}" for m in report.mismatches[:10])
        log.error("%s: %d of %d published paths differ from the manifest (changed behind our back): %s",
                  paths.driver_root, report.total_mismatches, report.checked, shown)  # fmt: skip
    return report


def last_verification(paths: HostPaths) -> IntegrityReport | None:
    """The recorded outcome of the check after ``Ready``, if it was made against the manifest now in
    DRIVER_ROOT (a later publish makes it stale); None otherwise."""
    try:
        text = statusfiles.read_verify_record(paths)
    except (HostReadError, DriverContainerError):
        return None
    report = parse_report(text) if text else None
    if report is None:
        if text:  # damaged: as if absent; the next check after Ready rewrites it
            log.warning("%s: ignored, not a record this version wrote", paths.verify_file)
        return None
    current, _manifest = read_manifest(paths.driver_root)
    if not current or hashlib.sha256(current.encode()).hexdigest() != report.manifest_sha256:
        return None
    return report
