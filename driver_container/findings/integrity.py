"""Findings from a check of DRIVER_ROOT against its manifest (driverroot/integrity.py): pure.

``status --verify`` checks now; ``init`` checks once after Ready and records the outcome, which
``status`` reports while that manifest is the published one. A mismatch is an error: consumers load
what is on disk, and a library changed behind our back is not the one the driver was verified with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver_container.findings.model import Finding

if TYPE_CHECKING:
    from pathlib import Path

    from driver_container.driverroot.integrity import IntegrityReport

SHOWN = 10  # paths named in the message; the count is exact


def integrity_findings(report: IntegrityReport | None, driver_root: Path, *, when: str) -> list[Finding]:
    """``when``: "now" (status --verify) or "after Ready" (the record init wrote)."""
    if report is None:
        return []
    found = [_stopped(report, driver_root, when)] if report.stopped else []
    if report.ok and (when != "now" or report.stopped):
        return found
    if report.ok:
        if not report.checked:
            return []  # nothing is published: other findings say so
        message = f"all {report.checked} published paths in {driver_root} match the manifest (content, mode, links)"
        return [Finding("info", "PUBLISHED_FILES_VERIFIED", message, "")]
    total = max(report.total_mismatches, len(report.mismatches))
    listed = "; ".join(f"{m.path}: {m.reason}" for m in report.mismatches[:SHOWN])
    more = f"; and {total - SHOWN} more" if total > SHOWN else ""
    return [
        *found,
        Finding(
            "error",
            "PUBLISHED_FILE_CHANGED",
            f"{total} of {report.checked} published paths in {driver_root} differ from the manifest "
            f"(checked {when}): {listed}{more}",
            "something other than this container wrote into DRIVER_ROOT; find it, then restart the driver "
            "pod: `init` rewrites every path that differs from its record",
        ),
    ]


def _stopped(report: IntegrityReport, driver_root: Path, when: str) -> Finding:
    return Finding(
        "warning",
        "PUBLISHED_FILES_PARTLY_VERIFIED",
        f"{driver_root}: {report.stopped} (checked {when}); {report.checked} paths checked",
        "DRIVER_ROOT holds far more bytes than a driver publishes, or the disk or CPU is very slow: look for "
        "large files in it; `init` rewrites every path that differs from its record",
    )
