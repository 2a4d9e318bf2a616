"""The canonical layout (pure: a ``PublishSources`` in, the list of intended entries out).

Whatever the image's layout: libraries in usr/lib/<triplet>/, binaries in usr/bin/, the interpreter at
its PT_INTERP path, firmware in lib/firmware/nvidia/<version>/, configs at their standard paths, a static
ldconfig at sbin/ldconfig.real with sbin/ldconfig beside it; with a static shell in the image, bin/sh and
empty dev/shm, proc and sys for the chroot of NVIDIA's DRA driver's MPS daemon (formats/userspace_layout.py); VDPAU
drivers in usr/lib/<triplet>/vdpau/, and
the unversioned libX.so -> SONAME links where the image has them (the toolkit looks for them beside the
library: nvidia-container-toolkit v1.20.0 internal/discover/symlinks.go getDotSoSymlinks).
Links are relative and never leave the root, because the toolkit resolves only relative links inside a
driver root (contract section 6).
Modes drop setuid/setgid/sticky and group/world write: the root is shared with every GPU container.
"""

from __future__ import annotations

import posixpath
from pathlib import PurePosixPath

from driver_container.base.errors import PublishError, UserspaceError
from driver_container.formats.userspace_layout import ROOT_PROC, ROOT_SHELL, ROOT_SHM, ROOT_SYS
from driver_container.publish.model import PlannedEntry, PublishPlan, PublishSources, SourceFile
from driver_container.publish.roles import VDPAU_DIR
from driver_container.runtime.fsutil import check_relative

SAFE_MODE_MASK = 0o755  # no setuid/setgid/sticky, no group/world write
MANIFEST_DIR = PurePosixPath(".driver-container")
SIDECAR_SRC_DIR = "usr/src"  # NVIDIA/gpu-operator 10ee5b36 object_controls.go transformGDSContainer's wait loop
DIR_MODE = 0o755  # what journal.py's mkdir makes; a consumer mounts its own tmpfs over dev/shm


def safe_mode(mode: int, *, executable: bool) -> int:
    return (mode & SAFE_MODE_MASK) | (0o755 if executable else 0o444)


def relative_target(link: PurePosixPath, dest: PurePosixPath) -> str:
    """Target for a link at ``link`` pointing to ``dest`` (both relative to the root)."""
    target = posixpath.relpath(str(dest), str(link.parent))
    resolved = posixpath.normpath(posixpath.join(str(link.parent), target))
    if resolved.startswith(".."):
        raise UserspaceError(f"link {link} -> {target} would leave the driver root", path=link)
    return target


class _Layout:
    def __init__(self) -> None:
        self.entries: dict[PurePosixPath, PlannedEntry] = {}
        self.placed: dict[str, PurePosixPath] = {}  # real source path -> where its content went

    def add(self, entry: PlannedEntry) -> None:
        # Every path comes from the image (PT_INTERP, SONAME, DT_NEEDED, file names): checked here, in the
        # pure plan, before anything touches the disk, so '..', absolute or over-long names never reach it.
        _check(entry.path, entry.source.shown if entry.source else str(entry.target))
        old = self.entries.get(entry.path)
        if old is not None and old != entry:
            raise UserspaceError(
                f"two different files would be published at {entry.path}: "
                f"{old.source.shown if old.source else old.target} and "
                f"{entry.source.shown if entry.source else entry.target}",
                path=entry.path,
                fix="remove one of them from the image",
            )
        self.entries[entry.path] = entry

    def file(self, path: PurePosixPath, src: SourceFile, *, executable: bool) -> PurePosixPath:
        """Publish ``src`` at ``path``, or link there if its content is already published elsewhere."""
        first = self.placed.get(str(src.real))
        if first is not None and first != path:
            self.link(path, first)
            return first
        self.placed[str(src.real)] = path
        self.add(PlannedEntry(path, "file", safe_mode(src.mode, executable=executable), source=src))
        return path

    def link(self, path: PurePosixPath, dest: PurePosixPath) -> None:
        _check(path, f"a link to {dest}")
        if path != dest:
            self.add(PlannedEntry(path, "link", 0o777, target=relative_target(path, dest)))


def _check(path: PurePosixPath, shown: str) -> None:
    try:
        check_relative(path)
    except PublishError as exc:
        raise UserspaceError(f"{exc.message} (from {shown})", path=shown, fix=exc.fix) from exc


def _in_root(absolute: str) -> PurePosixPath:
    """An absolute in-image path (PT_INTERP, a config) as a root-relative one; '..' is kept for ``add`` to
    refuse (PurePosixPath does not collapse it)."""
    return PurePosixPath(absolute.lstrip("/") or ".")


def _root_tools(layout: _Layout, space: PublishSources, libdir: PurePosixPath) -> None:
    """The static ldconfig with its ld.so.conf, and the static shell with dev/shm, proc and sys where there
    is one."""
    ldconfig = layout.file(PurePosixPath("sbin/ldconfig.real"), space.ldconfig, executable=True)
    layout.link(PurePosixPath("sbin/ldconfig"), ldconfig)
    if space.shell is not None:
        layout.file(PurePosixPath(ROOT_SHELL), space.shell, executable=True)
        for directory in (ROOT_SHM, ROOT_PROC, ROOT_SYS):  # mount points (driverroot/procsys.py for proc, sys)
            layout.add(PlannedEntry(PurePosixPath(directory), "dir", DIR_MODE))
    # gpu-operator's GDS/GDRCopy sidecars wait for this directory before their command runs
    # (lifecycle/companion.py); empty: nothing is ever built against it.
    layout.add(PlannedEntry(PurePosixPath(SIDECAR_SRC_DIR), "dir", DIR_MODE))
    conf = f"# written by nvidia-driver: the published NVIDIA libraries\n/{libdir}\n".encode()
    layout.add(PlannedEntry(PurePosixPath("etc/ld.so.conf"), "text", 0o644, data=conf))


def plan_publish(space: PublishSources) -> PublishPlan:
    layout = _Layout()
    libdir = PurePosixPath("usr/lib") / space.triplet
    sonames: dict[str, PurePosixPath] = {}
    if space.interpreter is not None:
        interp, src = space.interpreter
        layout.file(_in_root(str(interp)), src, executable=True)
    for name, src in space.libraries:
        dest = layout.file(libdir / name, src, executable=False)
        if src.elf and src.elf.soname:  # one without is loaded by path only: no link, nothing to cache
            layout.link(libdir / src.elf.soname, libdir / name)
            sonames.setdefault(src.elf.soname, dest)
    nvidia = frozenset(sonames)
    for needed, src in space.dependencies:
        dest = layout.file(libdir / src.real.name, src, executable=False)
        layout.link(libdir / needed, dest)
        soname = src.elf.soname if src.elf and src.elf.soname else needed
        sonames.setdefault(soname, dest)
    for name, src in space.extras:
        dest = layout.file(libdir / name, src, executable=False)
        soname = src.elf.soname if src.elf and src.elf.soname else name
        layout.link(libdir / soname, dest)
        sonames.setdefault(soname, dest)
    for name, src in space.vdpau:  # not in ld.so.conf's dir: libvdpau opens vdpau/<name> by path
        dest = layout.file(libdir / VDPAU_DIR / name, src, executable=False)
        if src.elf and src.elf.soname:
            layout.link(libdir / VDPAU_DIR / src.elf.soname, dest)
    for link, soname in space.dev_links:
        if soname in sonames:
            layout.link(libdir / link, libdir / soname)
    for name, src in space.binaries:
        layout.file(PurePosixPath("usr/bin") / name, src, executable=True)
    for name, src in space.firmware:
        layout.file(PurePosixPath("lib/firmware/nvidia") / space.version / name, src, executable=False)
    for inner, src in space.configs:
        layout.file(_in_root(str(inner)), src, executable=False)
    _root_tools(layout, space, libdir)
    entries = tuple(sorted(layout.entries.values(), key=lambda e: str(e.path)))
    return PublishPlan(space.version, space.triplet, entries, sonames, nvidia, frozenset(space.missing))
