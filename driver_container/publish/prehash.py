"""sha256 of source files computed on worker threads while the main thread scans the userspace.

The manifest records a sha256 per file, and hashing is most of a first publish's CPU time (229 MB of the
535 userspace: 0.19 CPU-s at 1.2 GB/s with SHA-NI, more than `cp -a` takes for the whole copy). The
scan before it is single-threaded Python (ELF headers), and hashlib releases the GIL while it hashes a
large buffer, so the files the scan will certainly publish (found by listing alone) are hashed on the
other cores meanwhile; apply then copies them without hashing (fsutil.stage_copy's ``known``).
A digest is only used for a source whose size and mtime are still those that were hashed.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from driver_container.errors import PublishError

log = logging.getLogger(__name__)

Identity = tuple[str, int, int]  # (real path, size, mtime_ns)


def _sha256(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    # Read through a small buffer, not mmap: mapped pages would count in the publisher's RSS (<= 80 MB).
    with os.fdopen(fd, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class Prehash:
    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._futures: dict[Identity, Future[str]] = {}

    def start(self, files: Iterable[Path], skip: set[Identity]) -> None:
        """Hash ``files`` (largest first) except those whose identity is in ``skip``."""
        wanted: list[Identity] = []
        for path in files:
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:
                continue  # the scan reports it properly
            identity = (str(path), st.st_size, st.st_mtime_ns)
            if identity not in skip and identity not in self._futures:
                wanted.append(identity)
        if not wanted:
            return
        self._pool = self._pool or ThreadPoolExecutor(self._workers, thread_name_prefix="publish-hash")
        for identity in sorted(wanted, key=lambda i: -i[1]):
            self._futures[identity] = self._pool.submit(_sha256, identity[0])

    def known(self, real: Path, size: int, mtime_ns: int) -> tuple[int, int, Callable[[], str]] | None:
        """(size, mtime_ns, digest) when this exact source is being hashed; ``digest()`` waits for the
        result (so a copy can run meanwhile) and raises the hashing error, if any, as a PublishError."""
        future = self._futures.get((str(real), size, mtime_ns))
        if future is None:
            return None

        def digest() -> str:
            try:
                return future.result()
            except OSError as exc:
                raise PublishError(f"{real}: cannot read: {exc.strerror}", fix=f"make {real} readable") from exc

        return size, mtime_ns, digest

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
