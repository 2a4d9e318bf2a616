"""Make DRIVER_ROOT match a plan, touching only what differs.

Crash safety (SIGKILL at any point, then a rerun gives the same root as a clean publish): new content is
written to temporary names beside its target and renamed over it (rename(2) is atomic, so no reader
sees a partial file); all temporaries are staged before the first rename, so a failure while staging
(ENOSPC...) leaves the previous root as it was; the manifest is written last by the caller, so after a
crash every file that does not match the old manifest is unknown and rewritten, and leftover
temporaries are swept. No per-file fsync: DRIVER_ROOT lives on /run (tmpfs, gone at reboot) and
SIGKILL safety comes from rename ordering, not from durability.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import stat
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from driver_container.errors import PublishError
from driver_container.fsutil import StagedFile, contained, ensure_dir, stage_copy, stage_write
from driver_container.publish.copier import TMP_SUFFIX, Copier, sweep_temporaries
from driver_container.publish.manifest import Manifest, Record
from driver_container.publish.model import PlannedEntry, PublishPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApplyResult:
    records: tuple[Record, ...]
    written: int
    unchanged: int
    removed: int


def _matches(entry: PlannedEntry, rec: Record | None, st: os.stat_result | None) -> bool:
    if rec is None or st is None or rec.mode != entry.mode:
        return False
    if entry.kind == "link":
        return rec.type == "link" and stat.S_ISLNK(st.st_mode)
    if not stat.S_ISREG(st.st_mode) or (st.st_size, st.st_mtime_ns) != (rec.size, rec.mtime_ns):
        return False
    if stat.S_IMODE(st.st_mode) != rec.mode:
        return False
    if entry.kind == "text":
        return entry.data is not None and hashlib.sha256(entry.data).hexdigest() == rec.sha256
    src = entry.source
    return src is not None and (rec.source, rec.source_size, rec.source_mtime_ns) == (
        str(src.real),
        src.size,
        src.mtime_ns,
    )


def _stage_link(dest: Path, target: str) -> StagedFile:
    for attempt in range(100):
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{attempt}{TMP_SUFFIX}")
        try:
            os.symlink(target, tmp)
            return StagedFile(tmp, dest, "", 0, 0)
        except FileExistsError:
            continue
    raise PublishError(f"{dest}: cannot create a temporary link")


def _stage_content(entry: PlannedEntry, dest: Path, root: Path) -> StagedFile:
    src = entry.source
    if entry.data is not None:
        return stage_write(dest, entry.data, mode=entry.mode, root=root, suffix=TMP_SUFFIX)
    if src is None:
        raise PublishError(f"{entry.path}: planned file has neither data nor source")  # plan_publish never does this
    # Keep the source's mtime, as cp -a does.
    return stage_copy(src.real, dest, mode=entry.mode, root=root, mtime_ns=src.mtime_ns, suffix=TMP_SUFFIX)


def _record(entry: PlannedEntry, staged: StagedFile) -> Record:
    src = entry.source
    if src is not None and staged.size != src.size:
        staged.discard()
        raise PublishError(
            f"{src.shown}: changed while being published ({src.size} -> {staged.size} bytes)", fix="retry"
        )
    return Record(
        str(entry.path), "file", entry.mode, staged.size, staged.sha256, mtime_ns=staged.mtime_ns,
        source=str(src.real) if src else "", source_size=src.size if src else 0,
        source_mtime_ns=src.mtime_ns if src else 0, elf=src.elf if src else None,
    )  # fmt: skip


def _stage(
    plan: PublishPlan, root: Path, old: dict[str, Record], copier: Copier
) -> tuple[list[StagedFile], list[Record], int]:
    staged: list[StagedFile] = []
    records: list[Record | None] = []
    jobs: list[tuple[int, PlannedEntry, Path]] = []  # (index in records, entry, destination) to copy
    unchanged = 0
    dirs: dict[PurePosixPath, Path] = {}  # each directory is created and checked once per publish
    try:
        for entry in plan.entries:
            if entry.path.parent not in dirs:
                dirs[entry.path.parent] = contained(root, ensure_dir(root, entry.path.parent) / "_").parent
            dest = dirs[entry.path.parent] / entry.path.name
            st = _lstat(dest)
            rec = old.get(str(entry.path))
            if entry.kind == "link":
                new = Record(str(entry.path), "link", entry.mode, target=entry.target or "")
                if _matches(entry, rec, st) and rec == new and os.readlink(dest) == entry.target:
                    unchanged += 1
                else:
                    staged.append(_stage_link(dest, entry.target or ""))
                records.append(new)
            elif _matches(entry, rec, st) and rec is not None:
                unchanged += 1  # same source identity, so the ELF facts just read (or reused) are its facts
                records.append(replace(rec, elf=entry.source.elf if entry.source else None))
            else:
                jobs.append((len(records), entry, dest))
                records.append(None)
        for index, new in _stage_contents(jobs, root, staged, copier):
            records[index] = new
    except OSError as exc:
        _discard(staged)
        where = exc.filename or root
        raise PublishError(
            f"{where}: cannot write the driver root: {exc.strerror}; the previous root is intact",
            fix=f"free space or fix permissions on the filesystem holding {root}",
        ) from exc
    except PublishError as exc:
        _discard(staged)
        raise PublishError(f"{exc.message}; the previous root is intact", fix=exc.fix) from exc
    return staged, [r for r in records if r is not None], unchanged


def _stage_contents(
    jobs: list[tuple[int, PlannedEntry, Path]], root: Path, staged: list[StagedFile], copier: Copier
) -> list[tuple[int, Record]]:
    """Stage every job's content; every staged file is appended to ``staged`` (so a failure discards all).

    Sources copied ahead of the scan (``Copier.start_early``) are taken from staging; the others are
    copied on the copier's worker threads, largest first so that one big file does not finish alone on
    one core at the end. Reading, hashing and writing release the GIL (os.readv/os.write, and hashlib for
    buffers over 2 KiB). All copies finish before an error is raised.
    """
    ordered = sorted(jobs, key=lambda job: -(job[1].source.size if job[1].source else 0))
    pending: list[tuple[int, PlannedEntry, Future[StagedFile]]] = []
    early: list[tuple[int, PlannedEntry, Path]] = []
    for index, entry, dest in ordered:
        if entry.source is not None and copier.has_early(entry.source):
            early.append((index, entry, dest))
        else:
            pending.append((index, entry, copier.submit(_stage_content, entry, dest, root)))
    results: list[tuple[int, PlannedEntry, StagedFile | BaseException]] = []
    for index, entry, dest in early:  # waits for the early copies while the workers copy the rest
        taken = copier.take_early(entry.source, dest, entry.mode) if entry.source else None
        if taken is None:
            pending.append((index, entry, copier.submit(_stage_content, entry, dest, root)))
        else:
            results.append((index, entry, taken))
    for index, entry, future in pending:
        error = future.exception()
        results.append((index, entry, error if error is not None else future.result()))
    done: list[tuple[int, Record]] = []
    failure: BaseException | None = None
    for index, entry, outcome in results:
        if isinstance(outcome, BaseException):
            failure = failure or outcome
            continue
        staged.append(outcome)
        try:
            done.append((index, _record(entry, outcome)))
        except PublishError as exc:
            failure = failure or exc
    if failure is not None:
        raise failure
    return done


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _discard(staged: list[StagedFile]) -> None:
    for content in staged:
        content.discard()


def apply_plan(plan: PublishPlan, root: Path, previous: Manifest | None, copier: Copier) -> ApplyResult:
    """Write what differs from ``previous``; remove paths it lists that the plan no longer has.

    ``copier`` (owned and closed by the caller) copies on its workers and holds the early copies."""
    old = previous.by_path() if previous else {}
    for directory in {e.path.parent for e in plan.entries}:
        sweep_temporaries(root / directory)
    staged, records, unchanged = _stage(plan, root, old, copier)
    for content in staged:
        if os.path.isdir(content.target) and not os.path.islink(content.target):
            shutil.rmtree(content.target)
        content.commit()
    planned = {str(e.path) for e in plan.entries}
    removed = 0
    for path in sorted(set(old) - planned):
        target = contained(root, root / path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
            removed += 1
            log.info("removed stale %s", path)
    return ApplyResult(tuple(records), len(staged), unchanged, removed)
