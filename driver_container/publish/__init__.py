"""Select, plan and apply the published driver root.

``publish_driver_root`` is the one entry point for the lifecycle: read USERSPACE_ROOT (``scan``), plan
the canonical layout (``plan``, pure), make DRIVER_ROOT match it (``apply``), refresh and check the
ld.so.cache (``verify``), then write the manifest last (``manifest``). Before the whole userspace has
been read and planned, only temporaries in DRIVER_ROOT/.driver-container/staging are written (``copier``,
removed whatever the outcome), so bad input leaves the previous root untouched.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from driver_container.fsutil import atomic_write_text
from driver_container.paths import HostPaths
from driver_container.publish.apply import apply_plan
from driver_container.publish.copier import Copier
from driver_container.publish.manifest import MANIFEST_PATH, Manifest, format_manifest, parse_manifest
from driver_container.publish.model import PublishPlan, PublishReport
from driver_container.publish.plan import plan_publish
from driver_container.publish.rootdir import create_driver_root, prepare_driver_root
from driver_container.publish.scan import describe_userspace, early_sources
from driver_container.publish.verify import refresh_cache
from driver_container.runner import Runner

__all__ = ["PublishPlan", "PublishReport", "publish_driver_root"]

log = logging.getLogger(__name__)


def publish_driver_root(paths: HostPaths, version: str, runner: Runner) -> PublishReport:
    """Publish the userspace of ``version`` (the verified loaded driver) into ``paths.driver_root``."""
    started = time.monotonic()
    root = paths.driver_root
    manifest_file = root / MANIFEST_PATH
    old_text = _read_manifest(manifest_file)
    previous = parse_manifest(old_text) if old_text else None
    create_driver_root(root)
    if prepare_driver_root(paths, runner):  # what we read before was another mount's content
        old_text = _read_manifest(manifest_file)
        previous = parse_manifest(old_text) if old_text else None
    known_elf = previous.elf_facts() if previous else None
    copier = Copier(root)
    try:
        # The big files are copied while the scan runs; those already published unchanged are skipped.
        skip = previous.source_identities() if previous else set()
        copier.start_early(early_sources(paths.userspace, version), skip=skip)
        space = describe_userspace(paths.userspace, version, runner, known_elf=known_elf)
        copier.scan_finished()
        plan = plan_publish(space)
        result = apply_plan(plan, root, previous, copier)
    finally:
        copier.close()
    ran = refresh_cache(plan, root, runner, changed=bool(result.written or result.removed))
    manifest = Manifest(version, plan.triplet, result.records)
    if manifest != previous:  # equal records format to the same text: skip formatting and writing it
        new_text = format_manifest(manifest)
        if new_text != old_text:
            atomic_write_text(manifest_file, new_text, root=root)
    lib = str(plan.libdir)
    report = PublishReport(
        written=result.written,
        unchanged=result.unchanged,
        removed=result.removed,
        libraries=tuple(str(e.path) for e in plan.entries if e.kind == "file" and str(e.path.parent) == lib),
        binaries=tuple(str(e.path) for e in plan.entries if str(e.path.parent) == "usr/bin"),
        firmware=tuple(str(e.path) for e in plan.entries if str(e.path).startswith("lib/firmware/")),
        duration_s=time.monotonic() - started,
        ldconfig_ran=ran,
        copied_early=copier.taken,
    )
    log.info(
        "published %s into %s: %d written (%d while scanning), %d unchanged, %d removed in %.2f s",
        version, root, report.written, report.copied_early, report.unchanged, report.removed, report.duration_s,
    )  # fmt: skip
    return report


def _read_manifest(manifest_file: Path) -> str:
    return manifest_file.read_text() if manifest_file.is_file() else ""
