"""What each published file is for, and so how strictly its dependencies are checked (pure; names in, facts out).

Required: what ``init`` itself runs (nvidia-smi, nvidia-persistenced and, through them, the interpreter)
and the compute libraries every CUDA/NVML workload loads. Their whole DT_NEEDED closure must be in the
image: a missing library is an error, because the root would not serve its purpose.

Optional: everything else NVIDIA ships (GLX/EGL/GLES/Vulkan, GTK, PKCS#11, X and wayland helpers, the
other tools). The container toolkit mounts them whenever they exist, and a workload that loads one brings
or lacks its own X/GTK/OpenSSL stack; the driver image does not need libgtk-3 to serve CUDA. So a missing
dependency of an optional file is a warning naming it, and the file is published as it is.

Besides the ``*.so.<driver version>`` libraries, the toolkit (NVIDIA/nvidia-container-toolkit v1.20.0,
commit 5505e2f94d9aaa08561490db974ba3cd676af209) mounts libraries with their own versions:
internal/discover/graphics.go newGraphicsLibrariesDiscoverer (libnvidia-egl-gbm/-wayland/-wayland2
``.so.*.*``), pkg/nvcdi/driver-nvml.go getLegacyNVVMLibraryMounts (``libnvidia-nvvm70.so.*``) and, behind
a feature flag, getExplicitDriverLibraryMounts (libnvidia-egl-xcb, libnvidia-egl-xlib, libnvidia-api);
getVersionLibs searches the libcuda directory and its ``vdpau`` subdirectory.
"""

from __future__ import annotations

import fnmatch
import re

# init runs these (lifecycle, verdict); the other NVIDIA binaries are published for the toolkit only.
REQUIRED_BINARIES = frozenset({"nvidia-smi", "nvidia-persistenced"})

# Compute and video libraries: what CUDA, NVML, OpenCL, NVENC/NVDEC and the JIT paths load.
CORE_LIBRARIES = frozenset(
    {
        "libcuda.so",
        "libcudadebugger.so",
        "libnvidia-ml.so",
        "libnvidia-ptxjitcompiler.so",
        "libnvidia-nvvm.so",
        "libnvidia-nvvm70.so",
        "libnvidia-gpucomp.so",
        "libnvidia-opencl.so",
        "libnvidia-cfg.so",
        "libnvcuvid.so",
        "libnvidia-encode.so",
        "libnvidia-opticalflow.so",
    }
)

# Libraries the toolkit mounts although their name does not end in the driver version (see above).
EXTRA_LIBRARY_PATTERNS = (
    "libnvidia-egl-gbm.so.*.*",
    "libnvidia-egl-wayland.so.*.*",
    "libnvidia-egl-wayland2.so.*.*",
    "libnvidia-egl-xcb.so.*",
    "libnvidia-egl-xlib.so.*",
    "libnvidia-nvvm70.so.*",
    "libnvidia-api.so.*",
    "libnvidia-sandboxutils.so.*",
)

VDPAU_PREFIX = "libvdpau_"  # libvdpau opens <VDPAU_DIR>/libvdpau_<driver>.so.1
VDPAU_DIR = "vdpau"  # <library dir>/vdpau: where libvdpau and the toolkit look for libvdpau_nvidia


def link_name(soname: str) -> str:
    """``libnvidia-ml.so.1`` -> ``libnvidia-ml.so``: the development link the toolkit recreates in a container
    when the driver root has it (internal/discover/symlinks.go getSoLink / getDotSoSymlinks)."""
    base, sep, _rest = soname.partition(".so")
    return base + sep if sep else ""


def library_is_required(file_name: str) -> bool:
    return link_name(file_name) in CORE_LIBRARIES


def binary_is_required(name: str) -> bool:
    return name in REQUIRED_BINARIES


# One regex for all patterns: ~190 names are matched per publish (measured: 8 fnmatch calls each were
# ~10% of an unchanged re-publish).
_EXTRA_LIBRARY = re.compile("|".join(fnmatch.translate(p) for p in EXTRA_LIBRARY_PATTERNS))


def is_extra_library(file_name: str) -> bool:
    return _EXTRA_LIBRARY.match(file_name) is not None
