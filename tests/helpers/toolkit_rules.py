"""An independent oracle for issue 16: what NVIDIA's container toolkit would mount from a driver root, checked
between an image's userspace and the root published from it. Written from the toolkit's source, not from
driver_container (so the publisher cannot agree with itself): NVIDIA/nvidia-container-toolkit v1.20.0,
commit 5505e2f94d9aaa08561490db974ba3cd676af209:

- pkg/nvcdi/driver-nvml.go getVersionLibs: ``*.so.<version>`` in the libcuda directory and its ``vdpau``;
  getLegacyNVVMLibraryMounts: ``libnvidia-nvvm70.so.*``; newDriverBinariesDiscoverer: the binaries below;
  newDriverFirmwareDiscoverer: ``nvidia/<version>/gsp*.bin`` under /lib/firmware.
- internal/discover/graphics.go: libnvidia-egl-gbm/-wayland/-wayland2 ``.so.*.*``; the configs below in
  /etc, /usr/local/share, /usr/share; the Vulkan ICD and layer files.
- internal/discover/symlinks.go getDotSoSymlinks: a container gets ``libX.so -> SONAME`` only when the
  driver root has a ``libX.so`` link beside the library.

X11 files (xorg.conf.d, nvidia_drv.so, libglxserver_nvidia) are not published: a driver root serves GPU
containers, not an X server on the node.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
            "nvidia-cuda-mps-server", "nvidia-imex", "nvidia-imex-ctl")  # fmt: skip
OWN_VERSION_LIBS = ("libnvidia-egl-gbm.so.*.*", "libnvidia-egl-wayland.so.*.*", "libnvidia-egl-wayland2.so.*.*",
                    "libnvidia-nvvm70.so.*")  # fmt: skip
CONFIGS = (
    "glvnd/egl_vendor.d/10_nvidia.json",
    "egl/egl_external_platform.d/15_nvidia_gbm.json",
    "egl/egl_external_platform.d/10_nvidia_wayland.json",
    "egl/egl_external_platform.d/09_nvidia_wayland2.json",
    "nvidia/nvoptix.bin",
    "OpenCL/vendors/nvidia.icd",
    "vulkan/icd.d/nvidia_icd.json",
    "vulkan/icd.d/nvidia_layers.json",
    "vulkan/implicit_layer.d/nvidia_layers.json",
)
CONFIG_DIRS = ("etc", "usr/local/share", "usr/share")
BIN_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin")
TRIPLETS = ("x86_64-linux-gnu", "aarch64-linux-gnu")


def in_root(root: Path, inner: str) -> Path | None:
    """Resolve ``inner`` as ``chroot root`` would (absolute links taken inside); None when it leads nowhere."""
    parts = [p for p in inner.split("/") if p]
    current = root
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            current = current.parent if current != root else root
            continue
        nxt = current / part
        if nxt.is_symlink():
            hops += 1
            if hops > 40:
                return None
            target = os.readlink(nxt)
            parts = [p for p in target.split("/") if p] + parts
            current = root if target.startswith("/") else current
            continue
        current = nxt
    return current if current.exists() else None


def _lib_dirs(root: Path) -> list[str]:
    dirs = []
    for t in TRIPLETS:
        dirs += [f"usr/lib/{t}/nvidia/current", f"usr/lib/{t}"]
    return [*dirs, "usr/lib64", "usr/lib"]


def _names(root: Path, inner: str) -> list[str]:
    real = in_root(root, inner)
    return sorted(os.listdir(real)) if real is not None and real.is_dir() else []


def _wanted_libraries(source: Path, version: str) -> dict[str, str]:
    """{real file name: where it must be in the root, relative to its libdir} for what the toolkit mounts."""
    wanted: dict[str, str] = {}
    for d in _lib_dirs(source):
        for name in _names(source, d):
            own = any(fnmatch.fnmatchcase(name, p) for p in OWN_VERSION_LIBS)
            if not (name.startswith("lib") and (name.endswith(f".so.{version}") or own)):
                continue
            real = in_root(source, f"{d}/{name}")
            if real is not None and real.is_file():
                wanted[real.name] = f"vdpau/{real.name}" if real.name.startswith("libvdpau_") else real.name
        for name in _names(source, f"{d}/vdpau"):
            if name.endswith(f".so.{version}"):
                wanted[name] = f"vdpau/{name}"
    return wanted


def toolkit_problems(source: Path, driver_root: Path, version: str) -> list[str]:
    """What the toolkit would find in ``source`` (an image's userspace) but not in ``driver_root``."""
    triplet = next((t for t in TRIPLETS if (driver_root / "usr/lib" / t).is_dir()), TRIPLETS[0])
    libdir = f"usr/lib/{triplet}"
    problems = []
    for name, where in sorted(_wanted_libraries(source, version).items()):
        if not (driver_root / libdir / where).is_file():
            problems.append(f"library {name}: not at {libdir}/{where}")
    problems += _link_problems(source, driver_root, libdir)
    for name in BINARIES:
        if any(in_root(source, f"{d}/{name}") for d in BIN_DIRS) and in_root(driver_root, f"usr/bin/{name}") is None:
            problems.append(f"binary {name}: not at usr/bin/{name}")
    for rel in CONFIGS:
        in_source = any(in_root(source, f"{d}/{rel}") for d in CONFIG_DIRS)
        if in_source and not any(in_root(driver_root, f"{d}/{rel}") for d in CONFIG_DIRS):
            problems.append(f"config {rel}: not in {', '.join(CONFIG_DIRS)}")
    for top in ("usr/share/nvidia/firmware", "lib/firmware", "usr/lib/firmware"):
        for name in _names(source, f"{top}/nvidia/{version}"):
            if (
                fnmatch.fnmatchcase(name, "gsp*.bin")
                and in_root(driver_root, f"lib/firmware/nvidia/{version}/{name}") is None
            ):
                problems.append(f"firmware {name}: not in lib/firmware/nvidia/{version}")
    return problems


def _link_problems(source: Path, driver_root: Path, libdir: str) -> list[str]:
    """Every ``libX.so`` link of the source that leads to a published library exists in the root and resolves
    (inside it) to that library's content."""
    problems = []
    published = {p.name: p for p in (driver_root / libdir).iterdir() if p.is_file() and not p.is_symlink()}
    seen: set[str] = set()
    for d in _lib_dirs(source):
        for name in _names(source, d):
            if not name.endswith(".so") or not (source / d / name).is_symlink() or name in seen:
                continue
            seen.add(name)
            real = in_root(source, f"{d}/{name}")
            # Only libX.so for a library libX.so.*: others (nvidia-drm_gbm.so) the toolkit's hooks make.
            if real is None or real.name not in published or not real.name.startswith(name + "."):
                continue
            got = in_root(driver_root, f"{libdir}/{name}")
            if not (driver_root / libdir / name).is_symlink() or got is None:
                problems.append(
                    f"link {name}: the source has it ({d}/{name}), the root has no resolving {libdir}/{name}"
                )
            elif got.read_bytes() != real.read_bytes():
                problems.append(f"link {name}: resolves to {got.name}, the source's to {real.name}")
    return problems
