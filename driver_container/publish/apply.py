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
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from driver_container.errors import PublishError
from driver_container.fsutil import contained
from driver_container.publish.manifest import Manifest, Record
from driver_container.publish.model import PlannedEntry, PublishPlan

log = logging.getLogger(__name__)

TMP_SUFFIX = ".dc-tmp"
CHUNK = 1 << 20


@dataclass(frozen=True)
class ApplyResult:
    records: tuple[Record, ...]
    written: int
    unchanged: int
    removed: int


def ensure_dir(root: Path, rel: PurePosixPath) -> Path:
    """Create ``root/rel`` component by component; a file or link in the way is ours to replace."""
    current = root
    for part in rel.parts:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            _mkdir(current)
            continue
        if stat.S_ISDIR(st.st_mode):
            continue
        log.info("replacing %s (a %s) with a directory", current, "link" if stat.S_ISLNK(st.st_mode) else "file")
        os.unlink(current)
        _mkdir(current)
    return current


def _mkdir(path: Path) -> None:
    try:
        os.mkdir(path, 0o755)
    except OSError as exc:
        raise PublishError(f"{path}: cannot create directory: {exc.strerror}") from exc


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


def _stage_link(dest: Path, target: str) -> Path:
    for attempt in range(100):
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{attempt}{TMP_SUFFIX}")
        try:
            os.symlink(target, tmp)
            return tmp
        except FileExistsError:
            continue
    raise PublishError(f"{dest}: cannot create a temporary link")


def _stage_content(entry: PlannedEntry, dest: Path) -> tuple[Path, Record]:
    fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=TMP_SUFFIX, dir=dest.parent)
    tmp = Path(name)
    try:
        return tmp, _fill(entry, fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fill(entry: PlannedEntry, fd: int) -> Record:
    digest = hashlib.sha256()
    with os.fdopen(fd, "wb", buffering=0) as out:
        src = entry.source
        if entry.data is not None:
            digest.update(entry.data)
            out.write(entry.data)
        elif src is not None:
            _copy(src.real, out, digest, src.size, src.shown)
        os.fchmod(out.fileno(), entry.mode)
        if src is not None:  # keep the source's mtime, as cp -a does
            os.utime(out.fileno(), ns=(src.mtime_ns, src.mtime_ns))
        st = os.fstat(out.fileno())
    return Record(
        str(entry.path), "file", entry.mode, st.st_size, digest.hexdigest(), mtime_ns=st.st_mtime_ns,
        source=str(src.real) if src else "", source_size=src.size if src else 0,
        source_mtime_ns=src.mtime_ns if src else 0,
    )  # fmt: skip


def _copy(real: Path, out: object, digest: hashlib._Hash, size: int, shown: str) -> None:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    total = 0
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb", buffering=0) as handle:
        while n := handle.readinto(buf):
            digest.update(view[:n])
            out.write(view[:n])  # type: ignore[attr-defined]
            total += n
    if total != size:
        raise PublishError(f"{shown}: changed while being published ({size} -> {total} bytes)", fix="retry")


def _sweep_temporaries(root: Path, dirs: set[PurePosixPath]) -> None:
    """Remove temporaries left by a killed publish (ours end with TMP_SUFFIX)."""
    for rel in dirs:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for name in os.listdir(root / rel):
                if name.startswith(".") and name.endswith(TMP_SUFFIX):
                    log.info("removing leftover temporary %s", root / rel / name)
                    os.unlink(root / rel / name)


def _stage(plan: PublishPlan, root: Path, old: dict[str, Record]) -> tuple[list[tuple[Path, Path]], list[Record], int]:
    staged: list[tuple[Path, Path]] = []
    records: list[Record] = []
    unchanged = 0
    try:
        for entry in plan.entries:
            dest = contained(root, ensure_dir(root, entry.path.parent) / entry.path.name)
            st = _lstat(dest)
            rec = old.get(str(entry.path))
            if entry.kind == "link":
                new = Record(str(entry.path), "link", entry.mode, target=entry.target or "")
                if _matches(entry, rec, st) and rec == new and os.readlink(dest) == entry.target:
                    unchanged += 1
                else:
                    staged.append((_stage_link(dest, entry.target or ""), dest))
                records.append(new)
            elif _matches(entry, rec, st) and rec is not None:
                unchanged += 1
                records.append(rec)
            else:
                tmp, new = _stage_content(entry, dest)
                staged.append((tmp, dest))
                records.append(new)
    except OSError as exc:
        _discard(staged)
        where = exc.filename or root
        raise PublishError(
            f"{where}: cannot write the driver root: {exc.strerror}; the previous root is intact",
            fix=f"free space or fix permissions on the filesystem holding {root}",
        ) from exc
    except PublishError:
        _discard(staged)
        raise
    return staged, records, unchanged


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _discard(staged: list[tuple[Path, Path]]) -> None:
    for tmp, _dest in staged:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def apply_plan(plan: PublishPlan, root: Path, previous: Manifest | None) -> ApplyResult:
    """Write what differs from ``previous``; remove paths it lists that the plan no longer has."""
    old = previous.by_path() if previous else {}
    _sweep_temporaries(root, {e.path.parent for e in plan.entries})
    staged, records, unchanged = _stage(plan, root, old)
    for tmp, dest in staged:
        if os.path.isdir(dest) and not os.path.islink(dest):
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    planned = {str(e.path) for e in plan.entries}
    removed = 0
    for path in sorted(set(old) - planned):
        target = contained(root, root / path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
            removed += 1
            log.info("removed stale %s", path)
    return ApplyResult(tuple(records), len(staged), unchanged, removed)
