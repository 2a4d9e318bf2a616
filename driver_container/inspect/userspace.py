"""The image's NVIDIA userspace and its driver version, found as the container toolkit finds it.

nvidia-container-toolkit (v1.20.0 @ 5505e2f9: pkg/lookup/library.go, internal/lookup/root/root.go) looks for
``libcuda.so.X.Y[.Z]`` (else ``libnvidia-ml.so.X.Y[.Z]``) in fixed search directories under the root,
including their ``nvidia/current`` subdirectories (Debian's layout), then in ``<root>/etc/ld.so.cache``
(64-bit entries only). The driver version is the suffix of that file name, and the legacy
``nvidia-container-cli`` only mounts libraries whose name ends with the LOADED module's version
(NVIDIA/libnvidia-container src/nvc_info.c ``select_libraries`` @ 1d44a936), so the
two must be equal exactly.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path, PurePosixPath
from typing import Literal

from driver_container.base.errors import HostReadError
from driver_container.base.fileread import converted, open_below, read_up_to, refuse_irregular
from driver_container.base.problems import Problem
from driver_container.base.records import NamedRecord
from driver_container.base.resolver import Root
from driver_container.formats.elfarch import HEADER_BYTES, elf_machine
from driver_container.formats.ldcache import FLAGS_BY_MACHINE, LD_SO_CACHE, LD_SO_CACHE_LIMIT, parse_ld_cache
from driver_container.formats.userspace_layout import LIBRARY_DIRS, VERSION_LIBS, driver_versions, version_of

log = logging.getLogger(__name__)

# Where the version was found: the toolkit's search dirs, else ld.so.cache, else nowhere.
VersionSource = Literal["search-path", "ld.so.cache", "none"]


class UserspaceVersion(NamedRecord):
    """The image's driver version as the toolkit finds it, and where (the version finder's view; what a
    publish takes is ``publish.model.PublishSources``)."""

    version: str | None
    root: Path
    library_dirs: tuple[PurePosixPath, ...]  # in-root dirs holding lib*.so.<version>
    libcuda: PurePosixPath | None
    libnvidia_ml: PurePosixPath | None
    source: VersionSource
    versions_seen: tuple[str, ...] = ()  # every version found; more than one is ambiguous
    problems: tuple[Problem, ...] = ()
    machine: int | None = None  # ELF e_machine of libcuda (else libnvidia-ml): the userspace's architecture


def _scan_dirs(root: Root, problems: list[Problem]) -> dict[str, list[PurePosixPath]]:
    """{lib: [in-root paths of lib.so.<version> files]} over the search dirs, in search order."""
    found: dict[str, list[PurePosixPath]] = {lib: [] for lib in VERSION_LIBS}
    for directory in LIBRARY_DIRS:
        try:
            names = root.listdir(directory)
        except HostReadError as exc:
            problems.append(Problem.of(exc))
            continue
        for name in names:
            for lib in VERSION_LIBS:
                if version_of(name, lib) is None:
                    continue
                path = PurePosixPath("/", directory, name)
                try:
                    if root.is_file(path):
                        found[lib].append(path)
                except HostReadError as exc:
                    problems.append(Problem.of(exc))
    return found


def _from_ld_cache(root: Root, problems: list[Problem]) -> dict[str, list[PurePosixPath]]:
    """Resolve ``libcuda.so.1``-style cache entries inside the root to their versioned file names."""
    found: dict[str, list[PurePosixPath]] = {lib: [] for lib in VERSION_LIBS}
    try:
        data = root.read_bytes(LD_SO_CACHE, limit=LD_SO_CACHE_LIMIT) if root.is_file(LD_SO_CACHE) else None
        if data is None:
            return found

        entries = parse_ld_cache(data, source=str(root.resolve(LD_SO_CACHE)))
    except HostReadError as exc:
        problems.append(Problem.of(exc))
        return found
    for entry in entries:
        if entry.flags not in FLAGS_BY_MACHINE.values():
            continue
        for lib in VERSION_LIBS:
            if not entry.key.startswith(lib + "."):
                continue
            try:
                real = root.resolve(entry.value)
            except HostReadError as exc:
                problems.append(Problem.of(exc))
                continue
            if version_of(real.name, lib) is not None and real.is_file():
                found[lib].append(root.inner_path(real))
    return found


def find_userspace(root: Root) -> UserspaceVersion:
    """Locate the image's libcuda/libnvidia-ml below ``root`` (USERSPACE_ROOT) and derive the driver version
    from their file names."""
    problems: list[Problem] = []
    source: VersionSource = "search-path"
    found = _scan_dirs(root, problems)
    if not any(found.values()):
        found, source = _from_ld_cache(root, problems), "ld.so.cache"
    versions = driver_versions(f.name for files in found.values() for f in files)
    primary = next((lib for lib in VERSION_LIBS if found[lib]), None)
    if primary is None:
        return UserspaceVersion(None, root.path, (), None, None, "none", (), tuple(problems))
    chosen = found[primary][0]
    version = version_of(chosen.name, primary)
    dirs = tuple(
        dict.fromkeys(f.parent for files in found.values() for f in files if f.name.endswith(f".so.{version}"))
    )
    log.debug("userspace %s from %s (%s)", version, chosen, source)
    machine = _elf_machine_of(root, chosen, problems)
    return UserspaceVersion(
        version=version,
        root=root.path,
        library_dirs=dirs,
        libcuda=found["libcuda.so"][0] if found["libcuda.so"] else None,
        libnvidia_ml=found["libnvidia-ml.so"][0] if found["libnvidia-ml.so"] else None,
        source=source,
        versions_seen=tuple(versions),
        problems=tuple(problems),
        machine=machine,
    )


def _elf_machine_of(root: Root, inner: PurePosixPath, problems: list[Problem]) -> int | None:
    """e_machine from the first 20 bytes of a library: opened without following a last link (it was
    resolved inside the root), non-blocking, and only when it is a regular file."""
    parts = root.resolve_parts(inner)
    real = root.path.joinpath(*parts)
    try:  # from the root, no link at any component (base/beneath.py): a directory swapped for one is refused
        with converted(real, verb="cannot open"):
            fd = open_below(root.path, "/".join(parts))
        refuse_irregular(fd, real)
        try:
            with converted(real):
                return elf_machine(read_up_to(fd, HEADER_BYTES))
        finally:
            os.close(fd)
    except HostReadError as exc:
        problems.append(Problem.of(exc))
        return None
