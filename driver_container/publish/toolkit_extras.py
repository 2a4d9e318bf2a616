"""What the container toolkit mounts from a driver root beyond ``*.so.<version>`` (nvidia-container-toolkit
v1.20.0, 5505e2f94d9aaa08561490db974ba3cd676af209: ``internal/discover/graphics.go`` for the libraries with
their own version, ``pkg/nvcdi/driver-nvml.go`` getVersionLibs for ``vdpau/``, ``internal/discover/symlinks.go``
for the ``libX.so`` links it only makes where they exist beside the library). All of it is optional
(``roles``): a file that cannot be read is logged and left out.
"""

from __future__ import annotations

import logging
import re
import stat
from pathlib import Path, PurePosixPath

from driver_container.base.errors import DriverContainerError
from driver_container.base.resolver import Root
from driver_container.formats.userspace_layout import LIBRARY_DIRS
from driver_container.publish.model import SourceFile
from driver_container.publish.roles import VDPAU_DIR, VDPAU_PREFIX, is_extra_library, link_name
from driver_container.publish.sources import ElfFacts, source_file

log = logging.getLogger(__name__)


def _elf_library(root: Root, inner: PurePosixPath, elf: ElfFacts) -> SourceFile | None:
    """A 64-bit ELF library with a SONAME at ``inner``, else None (logged): for the optional selections."""
    try:
        src = source_file(root, inner, elf=elf)
    except DriverContainerError as exc:
        log.warning("skipping %s: %s", inner, exc.message)
        return None
    if src.elf is None or src.elf.elf_class != 64 or not src.elf.soname:
        log.warning("skipping %s: not a 64-bit library with a DT_SONAME", src.shown)
        return None
    return src


def select_extras(root: Root, libraries: dict[str, SourceFile], elf: ElfFacts) -> dict[str, SourceFile]:
    """Libraries the toolkit mounts with their own version (``roles.EXTRA_LIBRARY_PATTERNS``), by real name."""
    found: dict[str, SourceFile] = {}
    seen_dirs: set[Path] = set()
    for d in LIBRARY_DIRS:
        real_dir = root.resolve(d)
        if real_dir in seen_dirs:
            continue
        seen_dirs.add(real_dir)
        for name in sorted(root.listdir(d)):
            if not is_extra_library(name):
                continue
            src = _elf_library(root, PurePosixPath("/", d, name), elf)
            if src is not None and src.real.name not in libraries and is_extra_library(src.real.name):
                found.setdefault(src.real.name, src)
    return found


def select_vdpau(
    root: Root, pattern: re.Pattern[str], elf: ElfFacts, libraries: dict[str, SourceFile]
) -> dict[str, SourceFile]:
    """``<library dir>/vdpau/*.so.<version>`` (the toolkit's getVersionLibs searches there too), and the
    VDPAU drivers found among the libraries (Debian keeps libvdpau_nvidia in nvidia/current and reaches it
    from vdpau/ through an alternatives link): moved out of ``libraries`` to be published in vdpau/, where
    libvdpau opens them and where the .run installs them."""
    found = {n: libraries.pop(n) for n in sorted(libraries) if n.startswith(VDPAU_PREFIX)}
    for d in LIBRARY_DIRS:
        base = f"{d}/{VDPAU_DIR}"
        for name in sorted(root.listdir(base)):
            if pattern.fullmatch(name) and name not in found:
                src = _elf_library(root, PurePosixPath("/", base, name), elf)
                if src is not None and pattern.fullmatch(src.real.name):
                    found[src.real.name] = src
    return found


def dev_links(root: Root, libraries: dict[str, SourceFile]) -> tuple[tuple[str, str], ...]:
    """(``libX.so``, SONAME) for each library whose image has a ``libX.so`` link resolving to it, in any
    library dir; a ``libX.so`` that resolves elsewhere or nowhere is logged and left out."""
    links: dict[str, str] = {}
    for src in libraries.values():
        soname = src.elf.soname if src.elf and src.elf.soname else ""
        link = link_name(soname)
        if not link or link == soname or link in links:
            continue
        for d in LIBRARY_DIRS:
            inner = f"{d}/{link}"
            st = root.lstat(inner)
            if st is None or not stat.S_ISLNK(st.st_mode):
                continue
            try:
                target = root.resolve(inner)
            except DriverContainerError as exc:
                log.warning("not publishing USERSPACE_ROOT/%s: %s", inner, exc.message)
                continue
            if target == src.real:
                links[link] = soname
                break
            log.warning("not publishing USERSPACE_ROOT/%s: resolves to %s, not %s", inner, target, src.shown)
    return tuple(sorted(links.items()))
