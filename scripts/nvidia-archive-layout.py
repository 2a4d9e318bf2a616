#!/usr/bin/env python3
"""Lay NVIDIA's driver archive out under a staging root, the file set decided by the archive's own manifest.

NVIDIA's redistributable driver archive (``nvidia_driver-linux-<x86_64|sbsa>-<version>-archive.tar.xz``, the
payload siderolabs/extensions pins in nvidia-gpu/vars.yaml) holds the ``.run`` installer's files sorted into
``bin/``, ``lib/``, ``etc/``, ``share/``, ``sbin/``, ``firmware/`` and ``supported-gpus/``, with the ``.run``'s
``.manifest`` as ``MANIFEST``: Sidero copies those directories back into one flat tree, renames ``MANIFEST``
to ``.manifest`` and runs NVIDIA's ``nvidia-installer --no-kernel-modules`` on it (siderolabs/extensions
nvidia-gpu/nvidia-container-toolkit/nvidia-pkgs/production/pkg.yaml @ 26822f5c95ab). The installer installs
exactly the manifest's entries, by type; this script does the same for the types a driver container
publishes, without running the installer (it refuses to run without a kernel, an X server check or a
writable /usr), and finds each entry where Sidero's flattening would have put it.

The manifest (nvidia-installer's format): a header (description, version, ...), then one entry a line:
``<path> <mode> <TYPE> [MODULE:<name>]... [NATIVE|COMPAT32] [<subdir>/] [<link target>]``.

Usage: nvidia-archive-layout.py ARCHIVE_DIR STAGING TRIPLET VERSION
  ARCHIVE_DIR  the archive extracted with --strip-components=1
  STAGING      the root to fill (the image's / later)
  TRIPLET      x86_64-linux-gnu or aarch64-linux-gnu
  VERSION      the driver version the build pins: the manifest must name the same

Standard library only (it runs in the image build before any environment exists). Exit 1 with one message
on any problem (no manifest, another version, an entry whose file is missing or not a regular file).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

# Where Sidero's pkg.yaml takes the flat tree's files from (``cp -r bin/* lib/* etc/* share/* sbin/*``).
SUBDIRS = ("", "bin", "lib", "etc", "share", "sbin")
ENTRY = re.compile(r"^(\S+) ([0-7]{4}) ([A-Z][A-Z0-9_]*)((?: \S+)*) *$")
ARCHES = ("NATIVE", "COMPAT32")
# Libraries of the X server and of other projects (libglvnd's dispatchers, Wine's DLSS shim): not NVIDIA's
# driver userspace that a container publishes (Debian packages libglvnd on its own; Talos runs no X).
LEFT_OUT_LIBS = frozenset({"XMODULE_SHARED_LIB", "GLX_MODULE_SHARED_LIB", "XMODULE_NEWSYM", "GLVND_LIB", "WINE_LIB"})
# X11 desktop tools (GTK, an X server): `UTILITY_BINARY` like nvidia-smi, never run in a driver container.
LEFT_OUT_LINKS = frozenset({"XMODULE", "GLX_MODULE", "GLVND", "WINE_LIB", *LEFT_OUT_LIBS})
LEFT_OUT_BINARIES = frozenset({"nvidia-settings", "nvidia-xconfig"})
# Configuration files by type: the directory each goes to (nvidia-installer's defaults, or Sidero's overrides).
CONFIG_DIRS = {
    "GLVND_EGL_ICD_JSON": "usr/share/glvnd/egl_vendor.d",
    "EGL_EXTERNAL_PLATFORM_JSON": "usr/share/egl/egl_external_platform.d",
    "CUDA_ICD": "etc/OpenCL/vendors",
    "OPENGL_DATA": "usr/share/nvidia",
    "APPLICATION_PROFILE": "usr/share/nvidia",
}
# gpu-operator mounts the host's <driver root>/lib/firmware over the container's /lib/firmware (docs/image.md).
FIRMWARE_DIR = "usr/share/nvidia/firmware/nvidia"
# Where NVIDIA's own driver container keeps it (driver_container/base/paths.py SUPPORTED_GPUS_FILE's default).
SUPPORTED_GPUS = "usr/share/nvidia-driver-assistant/supported-gpus/supported-gpus.json"
LICENSES = "licenses/NVIDIA"


class LayoutError(Exception):
    pass


@dataclass(frozen=True)
class Entry:
    path: str
    mode: int
    kind: str
    arch: str | None
    subdir: str
    target: str | None


def parse_manifest(text: str) -> tuple[str, list[Entry]]:
    """The version (line 2) and the file entries of a ``.manifest``; header lines match no entry."""
    lines = text.splitlines()
    if len(lines) < 3:
        raise LayoutError("MANIFEST: fewer than 3 lines")
    entries = []
    for line in lines[2:]:
        found = ENTRY.match(line)
        if not found:
            continue
        path, mode, kind, rest = found.groups()
        words = [w for w in rest.split() if ":" not in w]  # MODULE:<name>, INHERIT_PATH_DEPTH:<n>
        arch = next((w for w in words if w in ARCHES), None)
        words = [w for w in words if w not in ARCHES]
        subdir = next((w for w in words if w.endswith("/")), "")
        others = [w for w in words if not w.endswith("/")]
        target = others[-1] if kind.endswith("_SYMLINK") and others else None
        if path.startswith("/") or ".." in path.split("/") or (target or "").startswith("/"):
            raise LayoutError(f"MANIFEST: entry leaves the archive: {line!r}")
        entries.append(Entry(path, int(mode, 8), kind, arch, subdir.strip("/"), target))
    return lines[1].strip(), entries


def destination(entry: Entry, libdir: str, version: str) -> str | None:
    """Where an entry goes under the staging root, or None when a driver container has no use for it."""
    kind, name = entry.kind, Path(entry.path).name
    if entry.arch == "COMPAT32":
        return None
    if kind.endswith("_SYMLINK"):
        base = kind.removesuffix("_SYMLINK")
        if base == "UTILITY_BIN":
            return f"usr/bin/{name}"
        return None if base in LEFT_OUT_LINKS else "/".join(p for p in (libdir, entry.subdir, name) if p)
    if kind.endswith("_LIB"):
        return None if kind in LEFT_OUT_LIBS else "/".join(p for p in (libdir, entry.subdir, name) if p)
    if kind in ("UTILITY_BINARY", "NVIDIA_MODPROBE") and name not in LEFT_OUT_BINARIES:
        return f"usr/bin/{name}"
    if kind == "FIRMWARE":
        return f"{FIRMWARE_DIR}/{version}/{name}"
    if kind == "VULKAN_ICD_JSON":
        layer = name.startswith("nvidia_layers")
        return "etc/vulkan/implicit_layer.d/nvidia_layers.json" if layer else "etc/vulkan/icd.d/nvidia_icd.json"
    if kind in CONFIG_DIRS:
        return f"{CONFIG_DIRS[kind]}/{name}"
    return None


def source_of(archive: Path, entry: Entry) -> Path:
    """The entry's file in the extracted archive, where Sidero's flattening takes it from."""
    for sub in SUBDIRS:
        candidate = archive / sub / entry.path if sub else archive / entry.path
        if candidate.is_file() and not candidate.is_symlink():
            return candidate
    raise LayoutError(f"{entry.path} ({entry.kind}) is in MANIFEST but no regular file in the archive")


def install(source: Path, dest: Path, mode: int, *, icd: bool = False) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if icd:  # the .run's template names the library the loader opens
        dest.write_text(source.read_text().replace("__NV_VK_ICD__", "libGLX_nvidia.so.0"))
    else:
        shutil.copyfile(source, dest)
    os.chmod(dest, mode & 0o7777 or 0o644)


def extras(archive: Path, staging: Path, libdir: str, version: str) -> list[str]:
    """What the image carries beside the manifest's set: NVIDIA's licence and supported-gpus.json (both
    required: every driver archive has them), and NVSwitch's libnvidia-nscq where this archive has it."""
    done = []
    for rel, dest in (
        ("LICENSE", f"{LICENSES}/LICENSE"),
        ("supported-gpus/LICENSE", f"{LICENSES}/supported-gpus-LICENSE"),
        ("supported-gpus/supported-gpus.json", SUPPORTED_GPUS),
    ):
        source = archive / rel
        if not source.is_file() or source.is_symlink():
            if rel == "supported-gpus/LICENSE":
                continue
            raise LayoutError(f"the archive has no {rel}")
        install(source, staging / dest, 0o644)
        done.append(dest)
    for sub in ("lib", ""):
        nscq = archive / sub / f"libnvidia-nscq.so.{version}"
        if nscq.is_file() and not nscq.is_symlink() and not (staging / libdir / nscq.name).exists():
            install(nscq, staging / libdir / nscq.name, 0o755)
            done.append(f"{libdir}/{nscq.name}")
            break
    return done


def lay_out(archive: Path, staging: Path, triplet: str, version: str) -> dict[str, int]:
    manifest = archive / "MANIFEST"
    if not manifest.is_file():
        manifest = archive / ".manifest"  # an extracted .run has it under this name
    if not manifest.is_file():
        raise LayoutError(f"{archive}: no MANIFEST (not NVIDIA's driver archive)")
    found, entries = parse_manifest(manifest.read_text(errors="replace"))
    if found != version:
        raise LayoutError(f"MANIFEST is driver {found!r}, the build pins {version!r}")
    libdir = f"usr/lib/{triplet}"
    counts = {"installed": 0, "links": 0, "left out": 0}
    for entry in entries:
        dest = destination(entry, libdir, version)
        if dest is None:
            counts["left out"] += 1
            continue
        target = staging / dest
        if entry.target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                target.unlink()
            target.symlink_to(entry.target)
            counts["links"] += 1
        else:
            install(source_of(archive, entry), target, entry.mode, icd=entry.kind == "VULKAN_ICD_JSON")
            counts["installed"] += 1
    counts["extras"] = len(extras(archive, staging, libdir, version))
    (staging / "usr/share/nvidia").mkdir(parents=True, exist_ok=True)
    (staging / "usr/share/nvidia/driver-version").write_text(version + "\n")
    return counts


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    archive, staging, triplet, version = argv
    try:
        counts = lay_out(Path(archive), Path(staging), triplet, version)
    except (LayoutError, OSError) as error:
        print(f"nvidia-archive-layout: {error}", file=sys.stderr)
        return 1
    print("nvidia-archive-layout: " + ", ".join(f"{n} {what}" for what, n in counts.items()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
