"""Copies of source files into DRIVER_ROOT on worker threads, the largest ones started before the scan ends.

A first publish is CPU-bound: each byte is written to /run (tmpfs) and, for a source the image's digest
index (``publish.index``) does not describe, read and hashed for the manifest first. For the Debian 535
userspace (239 MB) hashing copies cost 0.27 CPU-s in ``runtime.staged.stage_copy`` (sha256 alone 0.135 s
with SHA-NI), in-kernel copies of indexed files about half that, against 0.14 s for `cp -a`, so the
copies use every core and start as early as possible.
The files that listing alone says will be published (versioned libraries, firmware: 9 files, 228 MB of
the 239) are copied into DRIVER_ROOT/.driver-container/staging while the main thread parses ELF headers;
``apply`` then renames each into place (rename(2) within one filesystem) instead of copying it again.

The previous root is never touched by this: staging holds only temporaries, removed by ``close`` whether
the publish succeeds or fails, and swept at the next start after a SIGKILL. A staged copy is used only for
a planned source whose (path, size, mtime_ns) is the one copied and whose copy has that size; anything
else (a failed early copy, a changed source, another filesystem below DRIVER_ROOT) is copied again by the
normal path, which reports errors with their own messages.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import TypeVar

from driver_container.base.errors import DriverContainerError, PublishError
from driver_container.driverroot.index import UserspaceIndex
from driver_container.driverroot.journal import STAGING, STATE_DIR
from driver_container.publish.model import SourceFile
from driver_container.runtime.fsutil import opened_dir, remove_tree_at, sweep_at
from driver_container.runtime.staged import StagedFile, stage_copy

log = logging.getLogger(__name__)

T = TypeVar("T")
Identity = tuple[str, int, int]  # (real path, size, mtime_ns)
TMP_SUFFIX = ".dc-tmp"
# One worker per core, at most 4: each holds a 1 MiB buffer, and more workers than cores only add
# contention (measured on 2 cores with the 535 userspace: 0.144 s with 2 workers, 0.167 s with 4).
COPY_WORKERS = min(4, len(os.sched_getaffinity(0)) or 1)


class Copier:
    def __init__(self, root: Path, workers: int = COPY_WORKERS, index: UserspaceIndex | None = None) -> None:
        self._root = root
        self._index = index if index is not None else UserspaceIndex(Path("/nonexistent"))
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="publish-copy")
        self._early: dict[Identity, Future[StagedFile | None]] = {}
        self._staging: Path | None = None
        self.taken = 0  # early copies used by apply
        # While the scan runs, early copies leave it one core: a copier more would time-slice with the
        # scan's thread and wait for the GIL between its chunks (measured on 2 cores, 535 userspace: the
        # first publish 1-6% faster in each of 4 interleaved A/B runs). ``scan_finished`` lifts the gate.
        during_scan = max(1, workers - 1)
        self._gate = threading.Semaphore(during_scan)
        self._held_back = workers - during_scan
        self._closing = False

    def submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        return self._pool.submit(fn, *args)

    def digest(self, real: Path, size: int, mtime_ns: int) -> str | None:
        """The image index's sha256 of this source when its entry matches (then it is copied unhashed)."""
        entry = self._index.lookup(real, size, mtime_ns)
        return entry.sha256 if entry is not None else None

    def start_early(self, files: Iterable[Path], skip: set[Identity]) -> None:
        """Copy ``files`` (largest first) into staging, except those whose identity is in ``skip``."""
        wanted: set[Identity] = set()
        for path in files:
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:
                continue  # the scan reports it
            if not stat.S_ISREG(st.st_mode):
                continue  # a FIFO, device or socket named like a library: the scan refuses it
            identity = (str(path), st.st_size, st.st_mtime_ns)
            if identity not in skip and identity not in self._early:
                wanted.add(identity)
        if not wanted:
            return
        try:
            self._staging = reset_staging(self._root)
        except (OSError, DriverContainerError) as exc:
            log.debug("not copying ahead of the scan: %s", exc)  # the normal path reports the real problem
            return
        for n, identity in enumerate(sorted(wanted, key=lambda i: (-i[1], i[0]))):
            self._early[identity] = self._pool.submit(self._copy_early, identity, self._staging / str(n))

    def _copy_early(self, identity: Identity, dest: Path) -> StagedFile | None:
        with self._gate:
            if self._closing:
                return None
            src = Path(identity[0])
            return stage_copy(
                src,
                dest,
                mode=0o600,
                root=self._root,
                mtime_ns=identity[2],
                suffix=TMP_SUFFIX,
                sha256=self.digest(src, identity[1], identity[2]),
            )

    def scan_finished(self) -> None:
        """Let every worker copy from now on (see ``__init__``)."""
        for _ in range(self._held_back):
            self._gate.release()
        self._held_back = 0

    def has_early(self, src: SourceFile) -> bool:
        return (str(src.real), src.size, src.mtime_ns) in self._early

    def take_early(self, src: SourceFile, mode: int) -> StagedFile | None:
        """The staged copy of ``src``, given ``mode``; None to copy normally."""
        future = self._early.pop((str(src.real), src.size, src.mtime_ns), None)
        if future is None:
            return None
        try:
            staged = future.result()
        except (OSError, DriverContainerError) as exc:
            log.debug("copying %s again: the early copy failed: %s", src.shown, exc)
            return None
        if staged is None:
            return None
        try:
            if staged.size == src.size:
                with opened_dir(self._root, STAGING) as fd:
                    # The plan decides the mode; the temporary was private until now.
                    os.chmod(staged.tmp.name, mode, dir_fd=fd)
                self.taken += 1
                return staged
        except (OSError, PublishError) as exc:
            log.debug("copying %s again: %s", src.shown, exc)
        staged.discard()
        return None

    def close(self) -> None:
        """Wait for the workers, then remove every staged copy not taken, and the staging directory."""
        self._closing = True  # copies not started yet are skipped, even by a worker waiting at the gate
        self.scan_finished()
        self._pool.shutdown(wait=True, cancel_futures=True)
        for future in self._early.values():
            if not future.cancelled() and future.exception() is None and (staged := future.result()) is not None:
                staged.discard()
        self._early.clear()
        remove_staging(self._root)


def reset_staging(root: Path, *, create: bool = True) -> Path:
    """An empty staging directory (what a killed publish left there is removed). A link or file where
    .driver-container belongs is ours to replace (never followed): it holds nothing consumers use.
    ``create=False`` only clears: an unchanged restart must not touch even .driver-container's mtime."""
    remove_staging(root)
    with opened_dir(root, "", create=True) as rfd:
        st = _lstat_or_none(rfd, STATE_DIR.name)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            log.warning("replacing %s (not a directory) with a directory", root / STATE_DIR)
            os.unlink(STATE_DIR.name, dir_fd=rfd)
    with opened_dir(root, STATE_DIR, create=True) as state:  # temporaries of killed manifest/journal writes
        sweep_at(state, lambda n: n.startswith(".") and n.endswith((".tmp", TMP_SUFFIX)), root / STATE_DIR)
    if create:
        with opened_dir(root, STAGING, create=True):
            pass
    return root / STAGING


def _lstat_or_none(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None


def remove_staging(root: Path) -> None:
    """Remove staging and, when then empty, .driver-container (a failed first publish leaves nothing)."""
    try:
        with opened_dir(root, STATE_DIR) as state:
            with contextlib.suppress(FileNotFoundError):
                remove_tree_at(state, STAGING.name)
            empty = not os.listdir(state)
        if empty:
            os.rmdir(root / STATE_DIR)
    except (OSError, DriverContainerError):
        pass


def sweep_temporaries(root: Path, directory: PurePosixPath) -> None:
    """Remove the temporaries (``.*.dc-tmp``) a killed publish of an earlier version left in ``directory``
    (below ``root``; reached without following links, so a symlinked directory is never swept)."""
    with contextlib.suppress(PublishError, OSError), opened_dir(root, directory) as fd:
        sweep_at(fd, lambda n: n.startswith(".") and n.endswith(TMP_SUFFIX), root / directory)
