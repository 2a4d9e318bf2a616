"""Atomic, contained writes. Every write to the host goes through here.

A file is written to a temporary name in its target directory, fsync'ed, then renamed over the target,
so a reader sees the old or the new content, never a part (rename(2) is atomic within a filesystem).
Targets are checked to stay inside their root and no symlink on the way is followed out of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from driver_container.errors import PublishError

log = logging.getLogger(__name__)


def contained(root: Path, target: Path) -> Path:
    """``target`` (absolute, below ``root``) with every existing parent checked not to be a symlink."""
    try:
        relative = target.relative_to(root)
    except ValueError as exc:
        raise PublishError(f"{target}: outside its root {root}") from exc
    if ".." in relative.parts:
        raise PublishError(f"{target}: '..' in a published path")
    current = root
    for part in relative.parts[:-1]:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode):
            raise PublishError(f"{current}: is a symlink; refusing to write through it")
        if not stat.S_ISDIR(st.st_mode):
            raise PublishError(f"{current}: exists and is not a directory", fix=f"remove {current}")
    return target


def ensure_dir(root: Path, rel: PurePosixPath) -> Path:
    """Create ``root/rel`` component by component; a file or link in the way is ours to replace, so no
    symlink on the way is ever followed out of ``root``."""
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


def _remove_stale_temporaries(target: Path) -> None:
    """Temp files of an earlier write of ``target`` that was killed (SIGKILL) before its rename.

    Writers of one target are serialised by the caller (the pid-file lock), so any such file is stale.
    """
    prefix = f".{target.name}."
    with contextlib.suppress(OSError):
        for entry in os.scandir(target.parent):
            if entry.name.startswith(prefix) and entry.name.endswith(".tmp") and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)


def atomic_write(target: Path, data: bytes, *, mode: int = 0o644, root: Path | None = None) -> None:
    """Write ``data`` to ``target`` atomically (temp file + rename); creates parent directories."""
    if root is not None:
        contained(root, target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(target)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise PublishError(f"{target}: cannot create: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise PublishError(f"{target}: cannot write: {exc.strerror}") from exc


def atomic_write_text(target: Path, text: str, *, mode: int = 0o644, root: Path | None = None) -> None:
    atomic_write(target, text.encode(), mode=mode, root=root)


COPY_CHUNK = 1 << 20  # 1 MiB: large enough that per-call overhead vanishes, small enough for a flat RSS


@dataclass(frozen=True)
class StagedFile:
    """New content under a temporary name on ``target``'s filesystem (beside it, or in the publish's
    staging directory); ``commit`` renames it into place."""

    tmp: Path
    target: Path
    sha256: str
    size: int
    mtime_ns: int

    def commit(self) -> None:
        try:
            os.replace(self.tmp, self.target)
        except OSError as exc:
            self.discard()
            raise PublishError(f"{self.target}: cannot replace: {exc.strerror}") from exc

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)


def _copy_hashing(src_fd: int, out_fd: int, digest: hashlib._Hash) -> int:
    """Copy in 1 MiB chunks, hashing what is written; returns the byte count.

    One read into a buffer, hashed and written from there, so each byte is read once. Measured (2026-12,
    31 files / 239 MB of the Debian 535 userspace, page cache warm, tmpfs target, one thread, best of 5):
    0.27 s, against 0.34 s for hashing the source and then copying it with sendfile, and 0.25 s for
    hashing and writing from an mmap of the source, not taken: a source truncated while mapped kills the
    publisher with SIGBUS. 4 MiB chunks were no faster. copy_file_range fails with EXDEV from ext4 to
    tmpfs, which is the production case (image overlay -> /run), so it would only add a second code path.
    """
    buf = bytearray(COPY_CHUNK)
    view = memoryview(buf)
    total = 0
    while n := os.readv(src_fd, [buf]):
        chunk = view[:n]
        digest.update(chunk)  # hashlib drops the GIL for large buffers
        while chunk:
            chunk = chunk[os.write(out_fd, chunk) :]
        total += n
    return total


def _stage(target: Path, root: Path | None, suffix: str, fill: Callable[[int, hashlib._Hash], int]) -> StagedFile:
    if root is not None:
        contained(root, target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if root is not None:
            contained(root, target)  # the parents now exist: check again that none is a symlink
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    except OSError as exc:
        raise PublishError(f"{target}: cannot create: {exc.strerror}") from exc
    tmp = Path(name)
    digest = hashlib.sha256()
    try:
        size = fill(fd, digest)
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    return StagedFile(tmp, target, digest.hexdigest(), size, st.st_mtime_ns)


def _finish(fd: int, mode: int, mtime_ns: int | None) -> None:
    os.fchmod(fd, mode)  # explicit: mkstemp creates 0600 and the umask must not apply
    if mtime_ns is not None:
        os.utime(fd, ns=(mtime_ns, mtime_ns))


def stage_copy(
    src: Path,
    target: Path,
    *,
    mode: int,
    root: Path | None = None,
    mtime_ns: int | None = None,
    suffix: str = ".tmp",
) -> StagedFile:
    """Copy ``src`` (opened without following a final symlink) to a temporary beside ``target``."""

    def fill(fd: int, digest: hashlib._Hash) -> int:
        try:
            src_fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise PublishError(f"{src}: cannot read: {exc.strerror}", fix=f"make {src} readable") from exc
        try:
            size = _copy_hashing(src_fd, fd, digest)
        except OSError as exc:
            raise PublishError(
                f"{target}: cannot copy {src}: {exc.strerror}", fix="free space on its filesystem"
            ) from exc
        finally:
            os.close(src_fd)
        _finish(fd, mode, mtime_ns)
        return size

    return _stage(target, root, suffix, fill)


def stage_write(target: Path, data: bytes, *, mode: int, root: Path | None = None, suffix: str = ".tmp") -> StagedFile:
    """Write ``data`` to a temporary beside ``target``."""

    def fill(fd: int, digest: hashlib._Hash) -> int:
        digest.update(data)
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view) :]
        except OSError as exc:
            raise PublishError(f"{target}: cannot write: {exc.strerror}", fix="free space on its filesystem") from exc
        _finish(fd, mode, None)
        return len(data)

    return _stage(target, root, suffix, fill)


def atomic_copy(src: Path, target: Path, *, mode: int, root: Path | None = None, mtime_ns: int | None = None) -> str:
    """Copy ``src`` to ``target`` atomically (temp file + rename); returns the sha256 hex of the content.

    No fsync, unlike ``atomic_write``: copies go to DRIVER_ROOT on /run (tmpfs), where rename ordering,
    not durability, is what keeps readers and a restarted publish consistent.
    """
    staged = stage_copy(src, target, mode=mode, root=root, mtime_ns=mtime_ns)
    staged.commit()
    return staged.sha256
