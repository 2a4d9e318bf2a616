"""Select, plan and apply the published driver root (the entry point of the publish package).

``publish_driver_root`` is the one entry point for the lifecycle: roll back a publish that was
interrupted (``journal.recover``), read USERSPACE_ROOT (``scan``), plan the canonical layout (``plan``,
pure, with its closure checked), stage every new file in DRIVER_ROOT/.driver-container/staging
(``apply.prepare``; the big ones are copied while the scan runs, ``copier``), then commit as one
journalled transaction (``journal``): the files, ``ldconfig`` into staging and its cache checked
(``cache_check``) before it replaces the live one, the manifest last. Any failure up to the commit point
rolls every replaced path back, so consumers see the previous root or the new one, never a mix that
stays; a failure is recorded for ``status`` (``statusfiles``) and cleared by the next good publish.
"""

from __future__ import annotations

import logging
import stat
import time
from pathlib import Path, PurePosixPath

from driver_container.base.errors import DriverContainerError, PublishError
from driver_container.base.paths import HostPaths
from driver_container.driverroot.index import LazyIndex
from driver_container.driverroot.journal import STAGING, Step, Transaction, recover
from driver_container.driverroot.manifest import MANIFEST_PATH, Manifest, format_manifest, read_manifest
from driver_container.formats.ldcache import LD_SO_CACHE as CACHE
from driver_container.publish.apply import Prepared, commit_steps, prepare
from driver_container.publish.cache_check import build_cache, cache_problems, closure_problems
from driver_container.publish.copier import TMP_SUFFIX, Copier, reset_staging, sweep_temporaries
from driver_container.publish.model import PublishPlan, PublishReport
from driver_container.publish.plan import plan_publish
from driver_container.publish.rootdir import create_driver_root, prepare_driver_root, prepare_existing_root
from driver_container.publish.scan import describe_userspace, early_sources
from driver_container.publish.unchanged import keep_unchanged_root, publish_inputs
from driver_container.runtime import statusfiles
from driver_container.runtime.dirtree import Tree
from driver_container.runtime.runner import Runner
from driver_container.runtime.staged import stage_write

__all__ = ["PublishPlan", "PublishReport", "publish_driver_root"]

log = logging.getLogger(__name__)

STAGED_MANIFEST = MANIFEST_PATH.name  # its temporary in STAGING, named in the journal before it exists


def publish_driver_root(
    paths: HostPaths, version: str, runner: Runner, *, check_unchanged: bool = True, root_prepared: bool = False
) -> PublishReport:
    """Publish the userspace of ``version`` (the verified loaded driver) into ``paths.driver_root``.

    A root that its manifest shows unchanged for the same inputs is kept without a scan
    (``unchanged.keep_unchanged_root``); ``check_unchanged=False`` when the caller has just checked, or to
    take the full path, which also compares every file with the image (tests). ``root_prepared``: the
    caller made this publish's mount decision already (``rootdir.prepare_existing_root``), not made again."""
    started = time.monotonic()
    if check_unchanged:
        changed = prepare_existing_root(paths, runner)  # the mount decision, once for this publish
        root_prepared = changed is not None
        kept = keep_unchanged_root(paths, version, changed)
        if kept is not None:
            return _unchanged_report(kept, time.monotonic() - started)
    try:
        report = _publish(paths, version, runner, root_prepared=root_prepared)
    except DriverContainerError as exc:
        statusfiles.write_publish_failure(paths.run_dir, version, exc.message)
        raise
    statusfiles.clear_publish_failure(paths.run_dir)
    return report


def _publish(paths: HostPaths, version: str, runner: Runner, *, root_prepared: bool) -> PublishReport:
    started = time.monotonic()
    root = paths.driver_root
    create_driver_root(root, paths.run_dir)
    # Before anything is read: mounts left by NVIDIA's script hide our root, and a noexec/nodev filesystem
    # gets DRIVER_ROOT's own tmpfs (driverroot/mount.py), unless decided for this publish already; then an
    # interrupted commit is undone.
    if not root_prepared:
        prepare_driver_root(paths, runner)
    recover(root)
    _text, previous = read_manifest(root)
    inputs = publish_inputs(paths.userspace, version) or ""  # before the scan: what this plan is computed from
    known_elf = previous.elf_facts() if previous else None
    index = LazyIndex(paths.userspace)  # read only if a source is not in the manifest
    copier = Copier(root, index=index)
    try:
        reset_staging(root, create=False)  # made when something is staged (apply, copier, ldconfig)
        # The big files are copied while the scan runs; those already published unchanged are skipped.
        skip = previous.source_identities() if previous else set()
        copier.start_early(early_sources(paths.userspace, version), skip=skip)
        space = describe_userspace(paths.userspace, version, runner, known_elf=known_elf, index=index)
        copier.scan_finished()
        plan = plan_publish(space)
        _check_closure(plan)
        for directory in sorted({e.path.parent for e in plan.entries}):
            sweep_temporaries(root, directory)  # left beside their targets by earlier versions of this code
        prepared = prepare(plan, root, previous, copier)
        if prepared.copied:  # asserted by the container tests: the image's index is really used
            log.info(
                "%d of %d files' digests from the image index (%d hashed)",
                prepared.from_index,
                prepared.copied,
                prepared.copied - prepared.from_index,
            )
        manifest = Manifest(version, plan.triplet, prepared.records, inputs)
        ran = _commit(plan, root, runner, prepared, manifest, previous)
    finally:
        copier.close()
    lib = str(plan.libdir)
    report = PublishReport(
        written=len(prepared.staged) + len(prepared.dirs),
        unchanged=prepared.unchanged,
        removed=len(prepared.removals),
        libraries=tuple(str(e.path) for e in plan.entries if e.kind == "file" and str(e.path.parent) == lib),
        binaries=tuple(str(e.path) for e in plan.entries if str(e.path.parent) == "usr/bin"),
        firmware=tuple(str(e.path) for e in plan.entries if str(e.path).startswith("lib/firmware/")),
        duration_s=time.monotonic() - started,
        ldconfig_ran=ran,
        copied_early=copier.taken,
    )
    log.info(
        "published %s into %s: %d written (%d while scanning), %d unchanged, %d removed in %.2f s",
        version,
        root,
        report.written,
        report.copied_early,
        report.unchanged,
        report.removed,
        report.duration_s,
    )
    return report


def _unchanged_report(manifest: Manifest, duration_s: float) -> PublishReport:
    """What the full path would report for a root it found unchanged: every entry is one record."""
    lib = f"usr/lib/{manifest.triplet}"
    paths = [PurePosixPath(r.path) for r in manifest.records]
    return PublishReport(
        written=0,
        unchanged=len(manifest.records),
        removed=0,
        libraries=tuple(
            r.path for r, p in zip(manifest.records, paths, strict=True) if r.type == "file" and str(p.parent) == lib
        ),
        binaries=tuple(r.path for r, p in zip(manifest.records, paths, strict=True) if str(p.parent) == "usr/bin"),
        firmware=tuple(r.path for r in manifest.records if r.path.startswith("lib/firmware/")),
        duration_s=duration_s,
        ldconfig_ran=False,
    )


def _check_closure(plan: PublishPlan) -> None:
    problems = closure_problems(plan)
    if problems:
        raise PublishError(
            "the planned root would not run: " + "; ".join(map(str, problems[:5])) + "; the previous root is intact",
            fix="install what is missing in the driver image",
        )


def _commit(
    plan: PublishPlan, root: Path, runner: Runner, prepared: Prepared, manifest: Manifest, previous: Manifest | None
) -> bool:
    """Run the journalled commit; returns whether ldconfig ran. Nothing is done for an unchanged root.

    The manifest records the identity of the ld.so.cache it goes with (``publish.unchanged``), so it is
    written after the cache is built: its step's temporary (STAGING/manifest.json) appears only then."""
    rebuild = prepared.changed or bool(cache_problems(plan, root))
    if not rebuild:
        manifest = manifest._replace(cache=_identity(root, PurePosixPath(CACHE)))
        if manifest == previous:
            return False
    steps = commit_steps(root, prepared)
    files = len(steps)
    existed = {str(CACHE): _exists(root, CACHE), str(MANIFEST_PATH): _exists(root, str(MANIFEST_PATH))}
    if rebuild:
        steps.append(Step("put", CACHE, existed[CACHE], "ld.so.cache"))
    steps.append(Step("put", str(MANIFEST_PATH), existed[str(MANIFEST_PATH)], STAGED_MANIFEST))
    transaction = Transaction(root, steps)
    transaction.begin()
    try:
        transaction.run_until(files)
        if rebuild:
            build_cache(plan, root, runner)  # checked in staging: a bad cache never replaces the live one
            manifest = manifest._replace(cache=_identity(root, STAGING / "ld.so.cache"))  # a rename keeps it
            transaction.run_next("put")
        staged = stage_write(
            root / STAGING / STAGED_MANIFEST,
            format_manifest(manifest).encode(),
            mode=0o644,
            root=root,
            suffix=TMP_SUFFIX,
        )
        staged.commit()  # within staging: the step's temporary now exists under its journalled name
        transaction.run_next("put")
        transaction.finish()
    except BaseException as exc:
        transaction.rollback()
        if isinstance(exc, OSError):
            raise PublishError(
                f"{exc.filename or root}: cannot commit the driver root: {exc.strerror}; the previous root is restored",
                path=exc.filename or root,
                fix=f"free space or fix permissions on the filesystem holding {root}",
            ) from exc
        if isinstance(exc, DriverContainerError):
            path = getattr(exc, "path", None)  # the classes that carry one (base/errors.py)
            raise PublishError(f"{exc.message}; the previous root is restored", path=path, fix=exc.fix) from exc
        raise
    return rebuild


def _identity(root: Path, rel: PurePosixPath) -> tuple[int, int] | None:
    """(size, mtime_ns) of the regular file ``rel`` below ``root`` (no link followed); None otherwise."""
    tree = Tree(root)
    try:
        st = tree.lstat(rel)
    finally:
        tree.close()
    return (st.st_size, st.st_mtime_ns) if st is not None and stat.S_ISREG(st.st_mode) else None


def _exists(root: Path, rel: str) -> bool:
    """Whether ``rel`` exists in the real directory tree (its parents real directories, no link followed)."""
    tree = Tree(root)
    try:
        return tree.lstat(PurePosixPath(rel)) is not None
    finally:
        tree.close()
