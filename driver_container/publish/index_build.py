"""Build the image's digest index (``publish.index``) at image build: ``nvidia-driver index-userspace``.

The scan itself decides what is indexed, so the index covers exactly what a publish of this image reads:
every file it would publish (hashed here, bounded by its size) and every ELF object whose facts it
needed (the closure looks at candidates it does not publish too). Written atomically inside
USERSPACE_ROOT at ``DIGEST_INDEX``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from driver_container.base.errors import PublishError, UserspaceError
from driver_container.base.resolver import Root
from driver_container.driverroot.index import IndexEntry, format_index
from driver_container.formats.elfdeps import ELF_MAGIC, ElfDeps
from driver_container.formats.userspace_layout import DIGEST_INDEX
from driver_container.publish.model import PublishSources, SourceFile
from driver_container.publish.scan import describe_userspace
from driver_container.publish.sources import ElfFacts
from driver_container.runtime.fsutil import atomic_write_text, open_regular
from driver_container.runtime.runner import Runner
from driver_container.runtime.staged import digest_regular

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexSummary:
    path: Path
    files: int
    elf: int
    size: int


def _sources(space: PublishSources) -> list[SourceFile]:
    groups = (
        space.libraries,
        space.binaries,
        space.firmware,
        space.configs,
        space.dependencies,
        space.extras,
        space.vdpau,
    )
    found = [src for group in groups for _name, src in group]
    if space.interpreter is not None:
        found.append(space.interpreter[1])
    return [*found, space.ldconfig]


def _entry(root: Path, real: Path, size: int, mtime_ns: int, facts: ElfDeps | None) -> IndexEntry:
    fd, st = open_regular(real)
    try:
        if (st.st_size, st.st_mtime_ns) != (size, mtime_ns):
            raise PublishError(
                f"{real}: changed while the userspace was indexed", path=real, fix="build the image again"
            )
        head = os.pread(fd, len(ELF_MAGIC), 0)
        digest, read = digest_regular(fd, size)
    finally:
        os.close(fd)
    if read != size:
        raise PublishError(f"{real}: shrank while the userspace was indexed", path=real, fix="build the image again")
    is_elf = head == ELF_MAGIC
    if is_elf and facts is None:
        return IndexEntry(str(real.relative_to(root)), size, mtime_ns, digest)  # ELF but not parsed: unknown
    return IndexEntry(str(real.relative_to(root)), size, mtime_ns, digest, is_elf, facts if is_elf else None)


def build_index(userspace: Root, version: str, runner: Runner) -> IndexSummary:
    """Scan ``userspace`` for ``version`` as a publish would and write its index (see the module doc)."""
    elf = ElfFacts()
    space = describe_userspace(userspace, version, runner, elf=elf)
    known = elf.known()
    wanted: dict[str, tuple[Path, int, int]] = {}
    for src in _sources(space):
        wanted[str(src.real)] = (src.real, src.size, src.mtime_ns)
    for name, size, mtime_ns in known:
        wanted.setdefault(name, (Path(name), size, mtime_ns))
    root = Path(os.fspath(userspace.path))
    entries = []
    for real, size, mtime_ns in wanted.values():
        if not real.is_relative_to(root) or real == root:
            log.info("not indexing %s: outside USERSPACE_ROOT %s", real, root)
            continue
        try:
            entries.append(_entry(root, real, size, mtime_ns, known.get((str(real), size, mtime_ns))))
        except PublishError as exc:
            raise UserspaceError(exc.message, path=exc.path, fix=exc.fix) from exc
    target = root / DIGEST_INDEX
    atomic_write_text(target, format_index(version, entries), root=root)
    summary = IndexSummary(target, len(entries), sum(1 for e in entries if e.elf), sum(e.size for e in entries))
    log.info(
        "indexed %d files (%d ELF objects, %.1f MB) of %s in %s",
        summary.files,
        summary.elf,
        summary.size / 1e6,
        version,
        target,
    )
    return summary
