"""What NVIDIA's container toolkit (and NVIDIA's DRA driver) also look for in a driver root, which an image
may lack (Debian's packages, NVIDIA's ``.run`` of older branches, an image without busybox-static), and
what a GPU workload loses when the published root has none (docs/publish.md, docs/mps.md).

``status`` lists these under "not in the image" (docs/status.md); the toolkit's own warnings on such a root
are in docs/publish.md ("Warnings nvidia-ctk prints on a published root"), tested with its real binaries.
Only ``status`` imports it (``init`` never needs it); ``absent_features`` is pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from driver_container.base.records import NamedRecord
from driver_container.driverroot.manifest import read_manifest
from driver_container.formats.numbers import driver_branch


class ToolkitFeature(NamedRecord):
    name: str  # as status shows it
    file_name: str  # a published path whose last component is this (or starts with it, with ``prefix``)
    loses: str
    prefix: bool = False
    since_branch: int = 0  # the first driver branch that ships it (0: not known to be branch-bound)


# Each from the consumer that uses it: the toolkit's binaries (NVIDIA/nvidia-container-toolkit v1.20.0
# pkg/nvcdi/driver-nvml.go newDriverBinariesDiscoverer) and legacy NVVM (getLegacyNVVMLibraryMounts;
# NVIDIA/nvidia-container-toolkit#1875: the library came with R575), NVIDIA's DRA driver
# (kubernetes-sigs/dra-driver-nvidia-gpu 95932046 cmd/compute-domain-daemon/main.go runs nvidia-imex,
# cmd/compute-domain-kubelet-plugin/nvlib.go checkHostIMEXReady runs nvidia-imex-ctl; its MPS control
# daemon chroots into the root only through its bin/sh, templates/mps-control-daemon.tmpl.yaml, and
# publish/static_tools.py says what happens without one).
TOOLKIT_FEATURES = (
    ToolkitFeature(
        "nvidia-imex",
        "nvidia-imex",
        "NVIDIA's DRA driver cannot run a ComputeDomain's IMEX daemon here (multi-node NVLink memory sharing)",
    ),
    ToolkitFeature("nvidia-imex-ctl", "nvidia-imex-ctl", "NVIDIA's DRA driver cannot check a host-managed IMEX daemon"),
    ToolkitFeature(
        "sh",
        "sh",
        "NVIDIA's DRA driver cannot run its MPS control daemon in the root (no static shell: busybox-static in "
        "the image): MPS sharing of a claim fails; the device plugin's MPS mode is not affected",
    ),
    ToolkitFeature(
        "nvidia-debugdump", "nvidia-debugdump", "GPU containers get no nvidia-debugdump (GPU state dumps for support)"
    ),
    ToolkitFeature(
        "libnvidia-nvvm70",
        "libnvidia-nvvm70.so.",
        'pre-CUDA-12.0 applications that JIT-link LTO code fail ("PTX JIT compiler library not found")',
        prefix=True,
        since_branch=575,
    ),
)


def absent_features(published_paths: Iterable[str], version: str) -> tuple[ToolkitFeature, ...]:
    """The ``TOOLKIT_FEATURES`` a root published for driver ``version`` lacks (a branch-bound one only from
    its branch on)."""
    names = {path.rpartition("/")[2] for path in published_paths}
    branch = driver_branch(version) or 0

    def present(f: ToolkitFeature) -> bool:
        return any(n.startswith(f.file_name) for n in names) if f.prefix else f.file_name in names

    return tuple(f for f in TOOLKIT_FEATURES if branch >= f.since_branch and not present(f))


def read_absent_features(driver_root: Path) -> tuple[ToolkitFeature, ...]:
    """What the root at DRIVER_ROOT lacks, from its manifest (read bounded, without following links); ()
    when nothing is published."""
    _text, manifest = read_manifest(driver_root)
    return absent_features((r.path for r in manifest.records), manifest.version) if manifest else ()
