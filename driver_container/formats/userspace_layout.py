"""Where an NVIDIA userspace keeps its files inside an image: the library dirs, the firmware dirs, the
multiarch triplets. Facts, no I/O: ``inspect.userspace`` (the version) and ``publish.scan`` (what to
publish) read the image through ``LIBRARY_DIRS``, the one list, so both see the same libraries.

``LIBRARY_DIRS`` holds every dir nvidia-container-toolkit searches for the driver's libraries
(pkg/lookup/library.go ``NewLibraryLocator``, NVIDIA/nvidia-container-toolkit commit d34b304: ``/``,
``/usr/lib64``, ``/usr/lib/<triplet>`` and its ``nvidia/current``, ``/lib64``, ``/lib/<triplet>`` and its
``nvidia/current``), plus ``usr/lib`` and ``lib``, where some images keep them (the publisher always took
those). The order is most specific first: where one file name is in two dirs, the first one wins, for the
version finder and the publisher alike. The toolkit's own order only matters inside the published root,
which keeps each library in one dir (usr/lib/<triplet>).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# ELF machine -> Debian/Ubuntu multiarch triplet, in the order the dirs are searched.
TRIPLETS = {"EM_X86_64": "x86_64-linux-gnu", "EM_AARCH64": "aarch64-linux-gnu"}
DEBIAN_SUBDIR = "nvidia/current"  # Debian's packages keep the driver's libraries one level down

# In-root library dirs (no leading "/"; "." is the root itself), searched in this order.
LIBRARY_DIRS: tuple[str, ...] = (
    *(
        d
        for t in TRIPLETS.values()
        for d in (f"usr/lib/{t}/{DEBIAN_SUBDIR}", f"usr/lib/{t}", f"lib/{t}/{DEBIAN_SUBDIR}", f"lib/{t}")
    ),
    "usr/lib64",
    "lib64",
    "usr/lib",
    "lib",
    ".",
)
# The libraries whose file name tells the driver version, in order of preference: the toolkit takes
# libcuda.so.X.Y[.Z], else libnvidia-ml.so.X.Y[.Z] (NVIDIA/nvidia-container-toolkit v1.20.0 @ 5505e2f9
# internal/lookup/root/root.go ``inferVersion``). The version
# finder (inspect.userspace) and the publisher's "found versions" hint (publish.scan) both use these.
VERSION_LIBS = ("libcuda.so", "libnvidia-ml.so")
_VERSIONED = re.compile(r"(?P<lib>lib[A-Za-z0-9_+-]+\.so)\.(?P<version>[0-9]+\.[0-9]+(?:\.[0-9]+)?)")


def version_of(file_name: str, lib: str) -> str | None:
    """``libcuda.so.595.91.07`` -> ``595.91.07`` for ``lib`` ``libcuda.so``; other names -> None."""
    match = _VERSIONED.fullmatch(file_name)
    return match.group("version") if match and match.group("lib") == lib else None


def driver_versions(file_names: Iterable[str]) -> list[str]:
    """The driver versions that ``file_names`` (one dir's listing, or several) show, sorted."""
    return sorted({v for name in file_names for lib in VERSION_LIBS if (v := version_of(name, lib)) is not None})


# Where the image keeps NVIDIA firmware (nvidia/<version>/gsp_*.bin). The image cannot use /lib/firmware
# alone: gpu-operator mounts the host's <driver root>/lib/firmware over the container's /lib/firmware
# (0500_daemonset.yaml), so our Dockerfile keeps it under usr/share/nvidia/firmware. That dir comes first:
# from the second start on, /lib/firmware shows the copies published last time, and taking those as
# sources would rewrite them (and rerun ldconfig) on every restart.
IMAGE_FIRMWARE_DIRS = ("usr/share/nvidia/firmware", "lib/firmware", "usr/lib/firmware")
# The digest index the image build writes (`nvidia-driver index-userspace`, docs/image.md): each file a
# publish may read, with its size, mtime, sha256 and ELF facts, so that `init` neither hashes nor parses
# them. Beside usr/share/nvidia/driver-version, which the Dockerfile writes for the same image.
DIGEST_INDEX = "usr/share/nvidia/driver-container-index.json"

# What the published root gives programs run chrooted in it by NVIDIA's DRA driver's MPS control daemon
# (kubernetes-sigs/dra-driver-nvidia-gpu templates/mps-control-daemon.tmpl.yaml @95932046: it chroots
# only when <root>/bin/sh or <root>/usr/bin/sh is executable), published only with a static shell:
# ROOT_SHELL, a static busybox found by argv[0] "sh"; ROOT_SHM, where the kubelet plugin mounts the
# claim's MPS shared memory only when it exists (cmd/gpu-kubelet-plugin/sharing.go setMpsShmMountPath);
# dev/null (node/devices.py), which nvidia-cuda-mps-control -d opens when it daemonizes; and ROOT_PROC,
# ROOT_SYS, where init mounts a procfs and a sysfs for libcuda in the chrooted MPS server (driverroot/procsys.py).
ROOT_SHELL = "bin/sh"
ROOT_SHM = "dev/shm"
ROOT_PROC = "proc"
ROOT_SYS = "sys"
