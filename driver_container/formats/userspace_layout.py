"""Where an NVIDIA userspace keeps its files inside an image: the library dirs the container toolkit
searches, the firmware dirs, the multiarch triplets. Facts, no I/O: ``inspect.userspace`` (the version)
and ``publish.scan`` (what to publish) read the image through these, so both name the same places.

The two lists below keep their own order and extent on purpose (behaviour unchanged by the layout
change): ``SEARCH_DIRS`` is the toolkit's version lookup (nvidia-container-toolkit, see
shared/reference/gpu-operator-contract.md section 6), ``lib_dirs`` the publisher's, most specific first,
which also takes ``usr/lib`` and ``lib``. Both are built from ``TRIPLETS`` and ``DEBIAN_SUBDIR`` only.
"""

from __future__ import annotations

# ELF machine -> Debian/Ubuntu multiarch triplet, in the order the dirs are searched.
TRIPLETS = {"EM_X86_64": "x86_64-linux-gnu", "EM_AARCH64": "aarch64-linux-gnu"}
DEBIAN_SUBDIR = "nvidia/current"  # Debian's packages keep the driver's libraries one level down

_BASE_DIRS = (
    "/usr/lib64",
    *(f"/usr/lib/{t}" for t in TRIPLETS.values()),
    "/lib64",
    *(f"/lib/{t}" for t in TRIPLETS.values()),
)
# The toolkit's search order: the root itself, then each base dir followed by its nvidia/current.
SEARCH_DIRS: tuple[str, ...] = ("/", *(d for base in _BASE_DIRS for d in (base, f"{base}/{DEBIAN_SUBDIR}")))
# Where the image keeps NVIDIA firmware (nvidia/<version>/gsp_*.bin). The image cannot use /lib/firmware
# alone: gpu-operator mounts the host's <driver root>/lib/firmware over the container's /lib/firmware
# (0500_daemonset.yaml), so our Dockerfile keeps it under usr/share/nvidia/firmware. That dir comes first:
# from the second start on, /lib/firmware shows the copies published last time, and taking those as
# sources would rewrite them (and rerun ldconfig) on every restart.
FIRMWARE_DIRS = ("usr/share/nvidia/firmware", "lib/firmware", "usr/lib/firmware")
# The digest index the image build writes (`nvidia-driver index-userspace`, docs/image.md): each file a
# publish may read, with its size, mtime, sha256 and ELF facts, so that `init` neither hashes nor parses
# them. Beside usr/share/nvidia/driver-version, which the Dockerfile writes for the same image.
DIGEST_INDEX = "usr/share/nvidia/driver-container-index.json"


def lib_dirs(triplet: str | None = None) -> list[str]:
    """Library dirs the publisher searches (the toolkit's and Debian's nvidia/current), most specific first."""
    triplets = [triplet] if triplet else list(TRIPLETS.values())
    dirs = []
    for t in triplets:
        dirs += [f"usr/lib/{t}/{DEBIAN_SUBDIR}", f"usr/lib/{t}", f"lib/{t}/{DEBIAN_SUBDIR}", f"lib/{t}"]
    return [*dirs, "usr/lib64", "lib64", "usr/lib", "lib"]
