"""Data passed between the publish stages: sources (``PublishSources``) -> plan -> report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from driver_container.driverroot.manifest import RecordType
from driver_container.formats.elffacts import ElfDeps


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A regular file to publish: where it really is and what it is."""

    real: Path  # resolved host path (inside USERSPACE_ROOT, or the ldconfig found on PATH)
    shown: str  # how errors and logs name it, e.g. "USERSPACE_ROOT/usr/bin/nvidia-smi"
    size: int
    mtime_ns: int
    mode: int
    elf: ElfDeps | None = None


@dataclass(frozen=True, slots=True)
class PublishSources:
    """Every file of the image's userspace that a publish of ``version`` takes, resolved and read (the
    input of the pure planner). Not ``inspect.userspace.UserspaceVersion``, which is only what the version
    finder saw; both look through ``formats.userspace_layout.LIBRARY_DIRS``."""

    version: str
    triplet: str
    libraries: tuple[tuple[str, SourceFile], ...]  # NVIDIA *.so.<version>, by published file name
    binaries: tuple[tuple[str, SourceFile], ...]
    firmware: tuple[tuple[str, SourceFile], ...]
    configs: tuple[tuple[PurePosixPath, SourceFile], ...]  # at their in-root path
    dependencies: tuple[tuple[str, SourceFile], ...]  # DT_NEEDED name -> file, closure minus NVIDIA libs
    interpreter: tuple[PurePosixPath, SourceFile] | None
    ldconfig: SourceFile
    shell: SourceFile | None = None  # a static busybox, published as bin/sh (static_tools.py)
    # Libraries the toolkit mounts with their own version (libnvidia-egl-wayland.so.1.1.13), by file name.
    extras: tuple[tuple[str, SourceFile], ...] = ()
    vdpau: tuple[tuple[str, SourceFile], ...] = ()  # <libdir>/vdpau/*.so.<version>, by file name
    dev_links: tuple[tuple[str, str], ...] = ()  # libX.so -> SONAME, where the image has that link
    missing: tuple[tuple[str, str], ...] = ()  # (real path, DT_NEEDED name) an optional object lacks


# A planned path: "file" (copied from its source), "link", "dir" (an empty directory a consumer mounts
# on, e.g. dev/shm), or "text" (generated data, e.g. etc/ld.so.conf), published and recorded as a "file"
# (manifest.RecordType).
EntryKind = Literal[RecordType, "text"]


@dataclass(frozen=True, slots=True)
class PlannedEntry:
    path: PurePosixPath  # relative to DRIVER_ROOT
    kind: EntryKind
    mode: int = 0o644
    source: SourceFile | None = None
    data: bytes | None = None
    target: str | None = None  # relative link target


@dataclass(frozen=True, slots=True)
class PublishPlan:
    version: str
    triplet: str
    entries: tuple[PlannedEntry, ...]
    # SONAME -> published path of the file ld.so must find for it (after `ldconfig -r`).
    sonames: dict[str, PurePosixPath]
    nvidia_sonames: frozenset[str] = frozenset()
    # (real source path, DT_NEEDED name) accepted as missing: optional libraries (publish/roles.py).
    optional_missing: frozenset[tuple[str, str]] = frozenset()

    @property
    def libdir(self) -> PurePosixPath:
        return PurePosixPath("usr/lib") / self.triplet


@dataclass(frozen=True, slots=True)
class PublishReport:
    written: int
    unchanged: int
    removed: int
    libraries: tuple[str, ...]
    binaries: tuple[str, ...]
    firmware: tuple[str, ...]
    duration_s: float
    ldconfig_ran: bool
    copied_early: int = 0  # of ``written``: copies made while the userspace was still being scanned
