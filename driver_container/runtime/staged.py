"""Staged writes and copies: new content under a temporary name (hashed while copied, or copied in the
kernel when its digest is already known), renamed into place by ``StagedFile.commit`` through directory
descriptors."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from driver_container.base.errors import PublishError
from driver_container.runtime.fsutil import (
    create_temporary,
    open_regular,
    opened_dir,
    relative_to,
    split_target,
    write_all,
)

log = logging.getLogger(__name__)


COPY_CHUNK = 1 << 20  # 1 MiB: large enough that per-call overhead vanishes, small enough for a flat RSS
KERNEL_CHUNK = 1 << 30  # per copy_file_range/sendfile call (the kernel caps one call at 0x7ffff000 bytes)
# copy_file_range(2) refuses these for a pair of files it cannot copy between (EXDEV: another filesystem
# type, e.g. the image's overlay -> tmpfs since Linux 5.19; EINVAL/EOPNOTSUPP/ENOSYS: not supported);
# sendfile(2) then copies any regular file to any file (Linux >= 2.6.33).
NO_COPY_RANGE = frozenset({errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS, errno.EBADF})


@dataclass(frozen=True, slots=True)
class StagedFile:
    """New content under a temporary name on ``target``'s filesystem (beside it, or in the publish's
    staging directory); ``commit`` renames it into place through directory descriptors of ``root``."""

    tmp: Path
    target: Path
    sha256: str
    size: int
    mtime_ns: int
    root: Path | None = None
    from_index: bool = False  # ``sha256`` is the image index's (copied in the kernel, not hashed here)

    def _base(self) -> Path:
        return self.root if self.root is not None else self.tmp.parent

    def commit(self) -> None:
        base = self._base()
        try:
            with (
                opened_dir(base, relative_to(base, self.tmp.parent)) as src,
                opened_dir(base, relative_to(base, self.target.parent)) as dst,
            ):
                os.replace(self.tmp.name, self.target.name, src_dir_fd=src, dst_dir_fd=dst)
        except (OSError, PublishError) as exc:
            self.discard()
            reason = exc.strerror if isinstance(exc, OSError) else exc.message
            raise PublishError(f"{self.target}: cannot replace: {reason}", path=self.target) from exc

    def discard(self) -> None:
        base = self._base()
        with contextlib.suppress(OSError, PublishError), opened_dir(base, relative_to(base, self.tmp.parent)) as fd:
            os.unlink(self.tmp.name, dir_fd=fd)


def _copy_hashing(src_fd: int, out_fd: int | None, digest: hashlib._Hash | None, limit: int) -> int:
    """Copy in 1 MiB chunks, hashing what is written; returns the byte count (never more than ``limit``).

    One read into a buffer, hashed and written from there, so each byte is read once. Measured (2026-12,
    31 files / 239 MB of the Debian 535 userspace, page cache warm, tmpfs target, one thread, best of 5):
    0.27 s, against 0.34 s for hashing the source and then copying it with sendfile, and 0.25 s for
    hashing and writing from an mmap of the source, not taken: a source truncated while mapped kills the
    publisher with SIGBUS. 4 MiB chunks were no faster. For a file whose digest the image's index gives,
    ``_copy_in_kernel`` copies without reading it here. ``out_fd``/``digest`` None: hash only / copy only.
    """
    buf = bytearray(COPY_CHUNK)
    view = memoryview(buf)
    total = 0
    while n := os.readv(src_fd, [buf]):
        total += n
        if total > limit:
            raise _grew(limit)
        chunk = view[:n]
        if digest is not None:
            digest.update(chunk)  # hashlib drops the GIL for large buffers
        if out_fd is not None:
            write_all(out_fd, chunk)
    return total


def _grew(limit: int) -> PublishError:
    return PublishError(f"grew past the {limit} bytes it had when opened", fix="retry")


def _copy_in_kernel(src_fd: int, out_fd: int, limit: int) -> int:
    """Copy without reading into this process (the digest is known): copy_file_range, else sendfile,
    else a plain read/write loop. Like ``_copy_hashing``, never more than ``limit`` bytes: each call asks
    for at most one byte past it, so a file that grew while copied is seen and refused.

    Measured (2026-12, Linux 6.18, the 40 largest files of the Debian 535 userspace, 271 MB, ext4 ->
    tmpfs, page cache warm, one thread): 0.20 CPU-s, against 0.42 s for read + sha256 + write and 0.22 s
    for read + write; what is left is the kernel filling tmpfs pages, which `cp -a` pays as well.
    """
    total, use_range = 0, True
    while True:
        want = min(limit + 1 - total, KERNEL_CHUNK)
        try:
            n = os.copy_file_range(src_fd, out_fd, want) if use_range else os.sendfile(out_fd, src_fd, None, want)
        except OSError as exc:
            if exc.errno not in NO_COPY_RANGE:
                raise
            if not use_range:  # sendfile refused too (a filesystem without splice support): plain copy
                return total + _copy_hashing(src_fd, out_fd, None, limit - total)
            use_range = False
            continue
        if n == 0:
            return total
        total += n
        if total > limit:
            raise _grew(limit)


def digest_regular(fd: int, limit: int) -> tuple[str, int]:
    """(sha256 hex, size) of what ``fd`` holds, reading no more than ``limit`` bytes (PublishError past it)."""
    digest = hashlib.sha256()
    size = _copy_hashing(fd, None, digest, limit)
    return digest.hexdigest(), size


def _stage(
    target: Path, root: Path | None, suffix: str, fill: Callable[[int, hashlib._Hash], int], known: str | None = None
) -> StagedFile:
    base, rel = split_target(target, root)
    with opened_dir(base, rel.parent, create=True) as dfd:
        try:
            fd, name = create_temporary(dfd, rel.name, suffix)
        except OSError as exc:
            raise PublishError(f"{target}: cannot create: {exc.strerror}", path=target) from exc
        digest = hashlib.sha256()
        try:
            size = fill(fd, digest)
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dfd)
            raise
        os.close(fd)
    sha256 = known or digest.hexdigest()
    return StagedFile(target.parent / name, target, sha256, size, st.st_mtime_ns, base, known is not None)


def _finish(fd: int, mode: int, mtime_ns: int | None) -> None:
    os.fchmod(fd, mode)  # explicit: the temporary is created 0600 and the umask must not apply
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
    sha256: str | None = None,
) -> StagedFile:
    """Copy ``src`` (a regular file: ``open_regular``) to a temporary beside ``target``.

    ``sha256``: the content's digest as the image's index records it (``publish.index``, trusted only for
    a source whose size and mtime match its entry): then the bytes are copied in the kernel, not hashed.
    """

    def fill(fd: int, digest: hashlib._Hash) -> int:
        src_fd, st = open_regular(src)
        try:
            if sha256 is None:
                size = _copy_hashing(src_fd, fd, digest, st.st_size)
            else:
                size = _copy_in_kernel(src_fd, fd, st.st_size)
        except PublishError as exc:
            raise PublishError(f"{src}: {exc.message}", path=src, fix=exc.fix) from exc
        except OSError as exc:
            raise PublishError(
                f"{target}: cannot copy {src}: {exc.strerror}", path=target, fix="free space on its filesystem"
            ) from exc
        finally:
            os.close(src_fd)
        _finish(fd, mode, mtime_ns)
        return size

    return _stage(target, root, suffix, fill, sha256)


def stage_write(target: Path, data: bytes, *, mode: int, root: Path | None = None, suffix: str = ".tmp") -> StagedFile:
    """Write ``data`` to a temporary beside ``target``."""

    def fill(fd: int, digest: hashlib._Hash) -> int:
        digest.update(data)
        try:
            write_all(fd, data)
        except OSError as exc:
            raise PublishError(
                f"{target}: cannot write: {exc.strerror}",
                path=target,
                fix="free space on its filesystem",
            ) from exc
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
