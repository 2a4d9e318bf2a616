"""Read the image's NVIDIA userspace (USERSPACE_ROOT) into a ``PublishSources`` description.

Everything is looked up through ``Root``: symlinks resolve as under ``chroot USERSPACE_ROOT`` (Debian
reaches nvidia-smi through ABSOLUTE /etc/alternatives links), so nothing outside the root is ever read.
Selection follows what consumers look for (docs/publish.md, what NVIDIA's container toolkit finds):
every ``*.so.<version>``
in the library dirs and ld.so.cache, the NVIDIA binaries, ``firmware/nvidia/<version>/*``, vendor configs,
and what else the toolkit mounts from a driver root (``roles``): libraries with their own version, the
``vdpau/`` folder, the unversioned ``libX.so`` links. Each object's role decides whether a missing
dependency is an error or a warning.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from driver_container.base.errors import HostReadError, LdCacheFormatError, UserspaceError
from driver_container.base.resolver import MAX_SYMLINKS, Root
from driver_container.driverroot.index import UserspaceIndex
from driver_container.driverroot.manifest import SourceKey
from driver_container.formats.elffacts import ElfDeps
from driver_container.formats.ldcache import FLAGS_BY_MACHINE, LD_SO_CACHE_LIMIT, CacheEntry, parse_ld_cache
from driver_container.formats.ldcache import LD_SO_CACHE as CACHE_PATH
from driver_container.formats.userspace_layout import IMAGE_FIRMWARE_DIRS, LIBRARY_DIRS, TRIPLETS, driver_versions
from driver_container.publish.closure import MAX_CANDIDATE_DEPTH, resolve_closure
from driver_container.publish.model import PublishSources, SourceFile
from driver_container.publish.roles import binary_is_required, library_is_required
from driver_container.publish.sources import ElfFacts, source_file
from driver_container.publish.static_tools import find_ldconfig, find_static_shell
from driver_container.publish.toolkit_extras import dev_links, select_extras, select_vdpau
from driver_container.runtime.runner import Runner

log = logging.getLogger(__name__)

NVIDIA_BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-modprobe",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
BIN_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "usr/local/bin", "usr/local/sbin")
# Vendor files looked up by the toolkit, Vulkan/GLVND/OpenCL loaders and OptiX (contract section 6).
CONFIG_FILES = (
    "etc/vulkan/icd.d/nvidia_icd.json",
    "usr/share/vulkan/icd.d/nvidia_icd.json",
    "etc/vulkan/implicit_layer.d/nvidia_layers.json",
    "usr/share/vulkan/implicit_layer.d/nvidia_layers.json",
    "etc/glvnd/egl_vendor.d/10_nvidia.json",
    "usr/share/glvnd/egl_vendor.d/10_nvidia.json",
    "etc/OpenCL/vendors/nvidia.icd",
    "usr/share/nvidia/nvoptix.bin",
)
CONFIG_GLOB_DIRS = ("usr/share/egl/egl_external_platform.d", "etc/egl/egl_external_platform.d")


def read_cache(root: Root) -> list[CacheEntry]:
    data = root.read_bytes(CACHE_PATH, limit=LD_SO_CACHE_LIMIT) if root.is_file(CACHE_PATH) else b""
    if not data:
        return []
    try:
        return parse_ld_cache(data, source=f"USERSPACE_ROOT/{CACHE_PATH}")
    except LdCacheFormatError as exc:
        log.warning("ignoring %s (fix: %s)", exc.message, exc.fix)
        return []


def _version_pattern(version: str) -> re.Pattern[str]:
    return re.compile(rf"lib.+\.so\.{re.escape(version)}")


def _listed_libraries(root: Root, version: str) -> list[PurePosixPath]:
    """``lib*.so.<version>`` names in the library dirs (each real directory once)."""
    pattern = _version_pattern(version)
    seen_dirs: set[Path] = set()
    listed: list[PurePosixPath] = []
    for d in LIBRARY_DIRS:
        real_dir = root.resolve(d)
        if real_dir in seen_dirs:
            continue
        seen_dirs.add(real_dir)
        listed += [PurePosixPath("/", d, n) for n in root.listdir(d) if pattern.fullmatch(n)]
    return listed


def _select_libraries(root: Root, version: str, cache: list[CacheEntry], elf: ElfFacts) -> dict[str, SourceFile]:
    pattern = _version_pattern(version)
    found: dict[str, SourceFile] = {}
    listed = _listed_libraries(root, version)
    listed_set = set(listed)
    # Values deeper than MAX_CANDIDATE_DEPTH come only from a crafted cache (resolving one costs its depth squared).
    cached = [
        PurePosixPath(e.value)
        for e in cache
        if e.flags in FLAGS_BY_MACHINE.values() and e.value.count("/") < MAX_CANDIDATE_DEPTH
    ]
    real_dirs: dict[PurePosixPath, Path] = {}
    for inner in [*listed, *cached]:
        if inner not in listed_set and not pattern.fullmatch(_final_name(root, inner, real_dirs)):
            continue  # cache entries are only candidates when they end in the version
        src = source_file(root, inner, elf=elf)  # dangling, looping or unreadable: a clear error
        real_name = src.real.name
        if not pattern.fullmatch(real_name):
            log.warning("skipping %s: resolves to %s, not a *.so.%s file", src.shown, real_name, version)
            continue
        if real_name in found:
            continue
        if src.elf is None or src.elf.elf_class != 64:
            log.debug("skipping %s: not a 64-bit library", src.shown)
            continue
        if not src.elf.soname and not library_is_required(real_name):
            # NVIDIA ships some without one (libnvidia-vulkan-producer.so.<v> in 535): loaded by path, and
            # the toolkit links libnvidia-vulkan-producer.so to it itself (internal/discover/graphics.go).
            log.info("%s has no DT_SONAME: published by its file name only", src.shown)
        elif not src.elf.soname:
            raise UserspaceError(
                f"{src.shown}: has no DT_SONAME, so ld.so and ldconfig cannot find it by name",
                path=src.shown,
                fix="use the library files shipped by NVIDIA's packages unmodified",
            )
        found[real_name] = src
    return found


def _final_name(root: Root, inner: PurePosixPath, real_dirs: dict[PurePosixPath, Path]) -> str:
    """``root.resolve(inner).name``, cheaper for the ~100 ld.so.cache entries of a distribution image.

    They share a few directories and are mostly links to a name in the same directory (libfoo.so.1 ->
    libfoo.so.1.2.3), so each directory is resolved once and such links are followed by name; any other
    link (a "/" in its target, "." or "..") or error takes the full in-root resolution.
    """
    if inner.parent not in real_dirs:
        real_dirs[inner.parent] = root.resolve(inner.parent)
    directory = str(real_dirs[inner.parent])
    name = inner.name
    for _ in range(MAX_SYMLINKS):
        try:
            st = os.lstat(os.path.join(directory, name))
        except (FileNotFoundError, NotADirectoryError):
            return name  # Root.resolve keeps a missing tail verbatim
        except OSError:
            break
        if not stat.S_ISLNK(st.st_mode):
            return name
        target = os.readlink(os.path.join(directory, name))
        if "/" in target or target in ("", ".", ".."):
            break
        name = target
    return root.resolve(inner).name


def _versions_present(root: Root) -> list[str]:
    return driver_versions(n for d in LIBRARY_DIRS for n in root.listdir(d))  # as the version finder reads them


def _triplet(libraries: dict[str, SourceFile], root: Root, version: str) -> str:
    if not libraries:
        others = _versions_present(root)
        raise UserspaceError(
            f"USERSPACE_ROOT ({root.path}): no library named lib*.so.{version} for the loaded driver {version}"
            + (f"; found versions {', '.join(others)}" if others else ""),
            path=root.path,
            fix=f"use a driver image whose userspace is exactly {version}",
        )
    machines = {src.elf.machine for src in libraries.values() if src.elf}
    usable = sorted(m for m in machines if m in TRIPLETS)
    if len(usable) != 1:
        raise UserspaceError(f"USERSPACE_ROOT: libraries for machines {sorted(machines)}; expected one of {TRIPLETS}")
    return TRIPLETS[usable[0]]


def _select_binaries(root: Root, elf: ElfFacts) -> dict[str, SourceFile]:
    found = {}
    for name in NVIDIA_BINARIES:
        for d in BIN_DIRS:
            if root.lstat(f"{d}/{name}") is not None:
                found[name] = source_file(root, f"{d}/{name}", elf=elf)
                break
    return found


def _firmware_files(root: Root, version: str) -> dict[str, str]:
    """name -> in-root path of ``nvidia/<version>/*`` in the image's firmware dirs (first dir wins)."""
    found: dict[str, str] = {}
    for top in IMAGE_FIRMWARE_DIRS:
        base = f"{top}/nvidia/{version}"
        for n in root.listdir(base):
            if n not in found and root.is_file(f"{base}/{n}"):
                found[n] = f"{base}/{n}"
    return found


def _select_firmware(root: Root, version: str) -> dict[str, SourceFile]:
    return {n: source_file(root, inner) for n, inner in _firmware_files(root, version).items()}


def early_sources(root: Root, version: str) -> list[Path]:
    """Real paths of files the scan will publish, found by listing alone (no ELF header read): the
    versioned libraries in the library dirs and the firmware. For ``copier``; the scan still decides."""
    try:
        inner: list[str | PurePosixPath] = [*_listed_libraries(root, version), *_firmware_files(root, version).values()]
    except HostReadError:
        return []  # the scan reports it
    found: set[Path] = set()
    for path in inner:
        try:
            found.add(root.resolve(path))
        except HostReadError:
            continue  # a loop: the scan reports it with its own message
    return sorted(found)


def _select_configs(root: Root) -> dict[PurePosixPath, SourceFile]:
    inner = [PurePosixPath(p) for p in CONFIG_FILES if root.lstat(p) is not None]
    inner += [PurePosixPath(d, n) for d in CONFIG_GLOB_DIRS for n in root.listdir(d) if "nvidia" in n]
    return {p: source_file(root, p) for p in inner}


def describe_userspace(
    root: Root,
    version: str,
    runner: Runner,
    *,
    known_elf: Mapping[SourceKey, ElfDeps] | None = None,
    index: UserspaceIndex | None = None,
    elf: ElfFacts | None = None,
) -> PublishSources:
    """Select and read everything to publish for ``version`` (reads only; writes nothing).

    ``known_elf``: ELF facts recorded by the last publish (``Manifest.elf_facts``), reused for sources
    whose identity is unchanged so that a restart parses no ELF header; ``index``: the image's digest
    index, whose facts serve a first publish the same way. ``elf``: the fact cache to use instead (the
    index build reads every fact the scan met from it).
    """
    root = root.snapshot()  # the userspace does not change while it is read; one lstat per path
    elf = elf if elf is not None else ElfFacts(known_elf, index)
    cache = read_cache(root)
    libraries = _select_libraries(root, version, cache, elf)
    triplet = _triplet(libraries, root, version)
    binaries = _select_binaries(root, elf)
    extras = select_extras(root, libraries, elf)
    vdpau = select_vdpau(root, _version_pattern(version), elf, libraries)
    closure = resolve_closure(root, triplet, cache, *_by_role(libraries, extras, vdpau, binaries), elf)
    ldconfig = find_ldconfig(root, runner, elf)
    machine = next(m for m, t in TRIPLETS.items() if t == triplet)
    shell = find_static_shell(root, machine, elf)
    log.debug(
        "ELF headers: %d read, %d from the manifest or met before, %d from the image index",
        elf.read,
        elf.reused,
        elf.from_index,
    )
    return PublishSources(
        version=version,
        triplet=triplet,
        libraries=tuple(sorted(libraries.items())),
        binaries=tuple(sorted(binaries.items())),
        firmware=tuple(sorted(_select_firmware(root, version).items())),
        configs=tuple(sorted(_select_configs(root).items())),
        dependencies=tuple(sorted(closure.dependencies.items())),
        interpreter=closure.interpreter,
        ldconfig=ldconfig,
        shell=shell,
        extras=tuple(sorted(extras.items())),
        vdpau=tuple(sorted(vdpau.items())),
        dev_links=dev_links(root, {**libraries, **extras}),
        missing=tuple(sorted(closure.missing)),
    )


def _by_role(
    libraries: dict[str, SourceFile],
    extras: dict[str, SourceFile],
    vdpau: dict[str, SourceFile],
    binaries: dict[str, SourceFile],
) -> tuple[set[str], list[SourceFile], list[SourceFile]]:
    """(SONAMEs the NVIDIA libraries provide, required objects, optional objects): see ``roles``."""
    provided = {src.elf.soname for src in [*libraries.values(), *extras.values()] if src.elf and src.elf.soname}
    required = [s for n, s in sorted(libraries.items()) if library_is_required(n)]
    required += [s for n, s in sorted(binaries.items()) if binary_is_required(n)]
    optional = [s for n, s in sorted(libraries.items()) if not library_is_required(n)]
    optional += [s for n, s in sorted(binaries.items()) if not binary_is_required(n)]
    optional += [*(s for _n, s in sorted(extras.items())), *(s for _n, s in sorted(vdpau.items()))]
    return provided, required, optional
