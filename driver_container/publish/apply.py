"""Stage what differs between a plan and DRIVER_ROOT, and turn it into the steps of one commit.

``prepare`` touches only DRIVER_ROOT/.driver-container/staging: every new file, text and link is staged
there (early copies are already there), so a failure while staging (ENOSPC, a source that changed...)
leaves the live root exactly as it was. ``commit_steps`` then lists, from what is on disk (looked up
through directory descriptors, never following a link), the directories to create, the paths to put
in place and the stale paths to remove; ``journal.Transaction`` runs them so that they can be undone.
No per-file fsync: DRIVER_ROOT lives on /run (tmpfs, gone at reboot); the journal is fsync'd.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from driver_container.base.errors import PublishError
from driver_container.driverroot.journal import STAGING, Step
from driver_container.driverroot.manifest import Manifest, Record
from driver_container.publish.copier import TMP_SUFFIX, Copier
from driver_container.publish.model import PlannedEntry, PublishPlan
from driver_container.runtime.dirtree import Tree
from driver_container.runtime.fsutil import check_relative, open_dir
from driver_container.runtime.staged import StagedFile, stage_copy, stage_write

log = logging.getLogger(__name__)


@dataclass
class Prepared:
    records: tuple[Record, ...]
    unchanged: int
    staged: list[tuple[PurePosixPath, StagedFile]] = field(default_factory=list)  # target -> its temporary
    removals: list[PurePosixPath] = field(default_factory=list)
    dirs: list[PurePosixPath] = field(default_factory=list)  # planned directories to create
    copied: int = 0  # files copied from a source
    from_index: int = 0  # of ``copied``: with the image index's digest (not hashed)

    @property
    def changed(self) -> bool:
        return bool(self.staged or self.removals or self.dirs)


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


def _in_place(entry: PlannedEntry, st: os.stat_result | None, tree: Tree) -> bool:
    """A planned directory or link is on disk as planned (its record was compared by the caller)."""
    if st is None:
        return False
    if entry.kind == "dir":
        return stat.S_ISDIR(st.st_mode)
    return stat.S_ISLNK(st.st_mode) and tree.readlink(entry.path) == entry.target


def _stage_link(root: Path, index: int, target: str) -> StagedFile:
    fd = open_dir(root, STAGING, create=True)
    try:
        for attempt in range(100):
            name = f".link{index}.{os.getpid()}.{attempt}{TMP_SUFFIX}"
            try:
                os.symlink(target, name, dir_fd=fd)
                break
            except FileExistsError:
                continue
        else:
            raise PublishError(f"cannot create a temporary link in {root / STAGING}", path=root / STAGING)
    finally:
        os.close(fd)
    staging = root / STAGING
    return StagedFile(staging / name, staging / name, "", 0, 0, root)


def _stage_content(entry: PlannedEntry, index: int, root: Path, sha256: str | None = None) -> StagedFile:
    dest = root / STAGING / f"w{index}"
    src = entry.source
    if entry.data is not None:
        return stage_write(dest, entry.data, mode=entry.mode, root=root, suffix=TMP_SUFFIX)
    if src is None:
        raise PublishError(
            f"{entry.path}: planned file has neither data nor source", path=entry.path
        )  # plan_publish never does this
    # Keep the source's mtime, as cp -a does.
    return stage_copy(
        src.real, dest, mode=entry.mode, root=root, mtime_ns=src.mtime_ns, suffix=TMP_SUFFIX, sha256=sha256
    )


def _submit(copier: Copier, entry: PlannedEntry, index: int, root: Path) -> Future[StagedFile]:
    src = entry.source
    known = copier.digest(src.real, src.size, src.mtime_ns) if src is not None else None
    return copier.submit(_stage_content, entry, index, root, known)


def _record(entry: PlannedEntry, staged: StagedFile) -> Record:
    src = entry.source
    if src is not None and staged.size != src.size:
        raise PublishError(
            f"{src.shown}: changed while being published ({src.size} -> {staged.size} bytes)",
            path=src.shown,
            fix="retry",
        )
    return Record(
        str(entry.path),
        "file",
        entry.mode,
        staged.size,
        staged.sha256,
        mtime_ns=staged.mtime_ns,
        source=str(src.real) if src else "",
        source_size=src.size if src else 0,
        source_mtime_ns=src.mtime_ns if src else 0,
        elf=src.elf if src else None,
    )


def prepare(plan: PublishPlan, root: Path, previous: Manifest | None, copier: Copier) -> Prepared:
    """Stage every entry that differs from ``previous`` and the live root; list stale paths to remove."""
    old = previous.by_path() if previous else {}
    tree = Tree(root)
    out = Prepared((), 0)
    records: list[Record | None] = []
    jobs: list[tuple[int, PlannedEntry]] = []  # (index in records, entry) to copy
    try:  # staging is made by the first thing staged: an unchanged restart leaves .driver-container as it was
        for entry in plan.entries:
            check_relative(entry.path)
            st = tree.lstat(entry.path)
            rec = old.get(str(entry.path))
            if entry.kind in ("dir", "link"):
                new = Record(str(entry.path), entry.kind, entry.mode, target=entry.target or "")
                if rec == new and _in_place(entry, st, tree):
                    out.unchanged += 1
                elif entry.kind == "dir":
                    out.dirs.append(entry.path)
                else:
                    out.staged.append((entry.path, _stage_link(root, len(records), entry.target or "")))
                records.append(new)
            elif _matches(entry, rec, st) and rec is not None:
                out.unchanged += 1  # same source identity, so the ELF facts just read (or reused) are its facts
                records.append(rec._replace(elf=entry.source.elf if entry.source else None))
            else:
                jobs.append((len(records), entry))
                records.append(None)
        for index, new, staged in _stage_contents(jobs, root, copier):
            records[index] = new
            out.staged.append((PurePosixPath(new.path), staged))
            out.copied += bool(new.source)
            out.from_index += staged.from_index
        out.removals = _stale(plan, old, tree)
    except OSError as exc:
        where = exc.filename or root
        raise PublishError(
            f"{where}: cannot write the driver root: {exc.strerror}; the previous root is intact",
            path=where,
            fix=f"free space or fix permissions on the filesystem holding {root}",
        ) from exc
    except PublishError as exc:
        raise PublishError(f"{exc.message}; the previous root is intact", path=exc.path, fix=exc.fix) from exc
    finally:
        tree.close()
    out.records = tuple(r for r in records if r is not None)
    return out


def _stage_contents(
    jobs: list[tuple[int, PlannedEntry]], root: Path, copier: Copier
) -> list[tuple[int, Record, StagedFile]]:
    """Stage every job's content in staging (discarded with it on failure).

    Sources copied ahead of the scan (``Copier.start_early``) are taken from staging; the others are
    copied on the copier's worker threads, largest first so that one big file does not finish alone on
    one core at the end. Reading, hashing and writing release the GIL (os.readv/os.write, and hashlib for
    buffers over 2 KiB). All copies finish before an error is raised.
    """
    ordered = sorted(jobs, key=lambda job: -(job[1].source.size if job[1].source else 0))
    pending: list[tuple[int, PlannedEntry, Future[StagedFile]]] = []
    early: list[tuple[int, PlannedEntry]] = []
    for index, entry in ordered:
        if entry.source is not None and copier.has_early(entry.source):
            early.append((index, entry))
        else:
            pending.append((index, entry, _submit(copier, entry, index, root)))
    results: list[tuple[int, PlannedEntry, StagedFile | BaseException]] = []
    for index, entry in early:  # waits for the early copies while the workers copy the rest
        taken = copier.take_early(entry.source, entry.mode) if entry.source else None
        if taken is None:
            pending.append((index, entry, _submit(copier, entry, index, root)))
        else:
            results.append((index, entry, taken))
    for index, entry, future in pending:
        error = future.exception()
        results.append((index, entry, error if error is not None else future.result()))
    done: list[tuple[int, Record, StagedFile]] = []
    failure: BaseException | None = None
    for index, entry, outcome in results:
        if isinstance(outcome, BaseException):
            failure = failure or outcome
            continue
        try:
            done.append((index, _record(entry, outcome), outcome))
        except PublishError as exc:
            failure = failure or exc
    if failure is not None:
        raise failure
    return done


def _stale(plan: PublishPlan, old: dict[str, Record], tree: Tree) -> list[PurePosixPath]:
    """Recorded paths the plan no longer has, as they are on disk. A directory is never removed: parents of
    files are not recorded, and one published for its own sake (a "dir" record: dev/shm, proc, sys) may be
    a mount point (driverroot/procsys.py), where rename(2) and rmdir(2) fail with EBUSY; it stays, unrecorded."""
    planned = {str(e.path) for e in plan.entries}
    stale = []
    for path in sorted(set(old) - planned):
        rel = PurePosixPath(path)
        st = tree.lstat(rel)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            stale.append(rel)
    return stale


def commit_steps(root: Path, prepared: Prepared) -> list[Step]:
    """The journal steps that make the live root what ``prepared`` staged (reads only)."""
    tree = Tree(root)
    steps: list[Step] = []
    real_dirs: dict[PurePosixPath, bool] = {PurePosixPath(): True}  # is a real directory before the commit
    entries: list[tuple[PurePosixPath, StagedFile | None]] = [*prepared.staged, *((d, None) for d in prepared.dirs)]
    try:
        for rel, staged in sorted(entries, key=lambda item: str(item[0])):
            if staged is None:  # a planned directory: made with its parents
                _dir_steps(tree, rel, real_dirs, steps)
                continue
            _dir_steps(tree, rel.parent, real_dirs, steps)
            existed = real_dirs[rel.parent] and tree.lstat(rel) is not None
            steps.append(Step("put", str(rel), existed, staged.tmp.name))
        steps += [Step("remove", str(rel), True) for rel in prepared.removals]
    finally:
        tree.close()
    return steps


def _dir_steps(tree: Tree, directory: PurePosixPath, real_dirs: dict[PurePosixPath, bool], steps: list[Step]) -> None:
    for depth in range(1, len(directory.parts) + 1):
        current = PurePosixPath(*directory.parts[:depth])
        if current in real_dirs:
            continue
        st = tree.lstat(current) if real_dirs[current.parent] else None
        real_dirs[current] = st is not None and stat.S_ISDIR(st.st_mode)
        if not real_dirs[current]:
            if st is not None:
                log.info("replacing %s (a %s) with a directory", tree.root / current, _kind(st))
            steps.append(Step("mkdir", str(current), st is not None))


def _kind(st: os.stat_result) -> str:
    return "link" if stat.S_ISLNK(st.st_mode) else "file"


def discard(prepared: Prepared) -> None:
    for _rel, staged in prepared.staged:
        with contextlib.suppress(OSError):
            staged.discard()
