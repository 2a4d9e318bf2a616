"""Which flavour of NVIDIA's kernel modules can drive which GPU, by PCI device id (pure; the ids are in
``gpu_ids``, generated from NVIDIA's own lists by scripts/make-gpu-ids.py).

Each answer is ``yes``, ``no`` or ``unknown``; only a ``no`` ever becomes a finding. The rules and where
they come from:

- The open modules refuse every GPU older than Turing: probing a GPU, ``rm_is_supported_device`` asks
  ``gpumgrIsDeviceRmFirmwareCapable``, true only for architectures >= TU100, and otherwise prints "... is not
  supported by open nvidia.ko because it does not include the required GPU System Processor (GSP)" and the
  probe fails, so the GPU is never bound (NVIDIA/open-gpu-kernel-modules
  src/nvidia/arch/nvalloc/unix/src/osapi.c, src/nvidia/src/kernel/gpu_mgr/gpu_mgr.c
  ``_gpumgrIsRmFirmwareCapableChip``, kernel-open/nvidia/nv-pci.c ``nv_pci_probe``, all @ df1c9a3de2be,
  595.45.04). The ids of Maxwell, Pascal and Volta GPUs are those NVIDIA's supported-gpus.json lists
  without the ``kernelopen`` feature.
- The proprietary modules refuse Blackwell and Grace Hopper: NVIDIA's supported-gpus.json marks the GPUs
  the proprietary modules drive besides the open ones with ``gsp_proprietary_supported`` (NVIDIA's
  gpu-driver-util, NVIDIA/gpu-driver-container gpu-driver-util/main.go @ 758ab9c6e626), which GH200 lacks;
  Blackwell is "only supported by the open kernel modules" (NVIDIA, "NVIDIA Transitions Fully Towards
  Open-Source GPU Kernel Modules", 2024-07-17: Grace Hopper and Blackwell must use them). Such a GPU is
  bound, then every open of it fails: "NVRM: The NVIDIA GPU <addr> (PCI ID: 10de:2c3a) installed in this
  system requires use of the NVIDIA open kernel modules." and "RmInitAdapter failed!", and nvidia-smi
  says "No devices were found" (awslabs/amazon-eks-ami#2769, driver 580).
- No driver before the 570 branch knows a Blackwell GPU: the open modules' README lists none before
  570.86.15 (its "Compatible GPUs" table at every tag of NVIDIA/open-gpu-kernel-modules), so a 535 or 550
  module of either flavour cannot drive one.
- No driver after the 580 branch drives a Maxwell, Pascal or Volta GPU: "the Release 580 series will be
  the last to support GPUs based on the Maxwell, Pascal, and Volta architectures" (NVIDIA, "Unix Graphics
  Feature Deprecation Schedule", NVIDIA Developer Forums,
  https://forums.developer.nvidia.com/t/unix-graphics-feature-deprecation-schedule/60588, updated 2025-06);
  NVIDIA's supported-gpus.json of the 590 and later branches gives their ids ``"legacybranch": "580.xx"``.
  Their ``last_branch`` is 580: a newer driver of either flavour cannot drive them (``dropped``).
- Everything else is ``unknown``: an id in none of the lists (a GPU newer than the lists, or one of a
  legacy branch), the proprietary modules on the few ids only the README lists (T4 10de:1eb8, H20 ...).
"""

from __future__ import annotations

from typing import Literal

from driver_container.base.records import NamedRecord
from driver_container.formats.gpu_ids import GPU_ROWS
from driver_container.formats.kernel.nvidia_proc import ModuleFlavour
from driver_container.formats.numbers import driver_branch

Support = Literal["yes", "no", "unknown"]
BLACKWELL_FIRST_BRANCH = 570
# The last branch that drives each generation NVIDIA has moved to a legacy branch (the deprecation notice above).
LAST_BRANCHES: dict[str, int] = {"Maxwell": 580, "Pascal": 580, "Volta": 580}

# The source of each "no", as the findings cite it.
REFUSAL_SOURCES: dict[tuple[ModuleFlavour, str], str] = {
    ("open", "pre-Turing"): (
        "the open modules need the GPU System Processor of Turing and later GPUs (NVIDIA/open-gpu-kernel-modules "
        "osapi.c rm_is_supported_device, gpu_mgr.c _gpumgrIsRmFirmwareCapableChip @ df1c9a3)"
    ),
    ("proprietary", "Blackwell"): (
        "Blackwell GPUs are supported only by the open modules (NVIDIA, 'Transitions Fully Towards Open-Source "
        "GPU Kernel Modules'; kernel log: 'requires use of the NVIDIA open kernel modules')"
    ),
    ("proprietary", "Hopper"): (
        "NVIDIA's supported-gpus.json gives this Grace Hopper id 'kernelopen' without "
        "'gsp_proprietary_supported' (NVIDIA/gpu-driver-container gpu-driver-util @ 0f4ecad)"
    ),
}


class GpuSupport(NamedRecord):
    device: int
    generation: str  # Maxwell ... Blackwell (pci.ids' chip code name of the id); "" when not known
    open: Support
    proprietary: Support
    last_branch: int | None = None  # the newest branch that drives it, where NVIDIA moved it to a legacy branch
    name: str = ""  # NVIDIA's name of the id (supported-gpus.json); "" from the table
    source: str = "table"  # "table" (gpu_ids.py) or the supported-gpus.json it was read from

    @property
    def label(self) -> str:
        """``Volta``, ``Volta, Tesla V100-PCIE-16GB`` or ``Tesla V100-PCIE-16GB``: what a message names."""
        return ", ".join(part for part in (self.generation, self.name) if part) or "unknown generation"

    def drives(self, flavour: ModuleFlavour) -> Support:
        return self.open if flavour == "open" else self.proprietary

    def refusal_source(self, flavour: ModuleFlavour) -> str:
        if self.source != "table":
            features = "with 'kernelopen' only" if flavour == "proprietary" else "without 'kernelopen'"
            return f"{self.source} lists 10de:{self.device:04x} {features}"
        key = "pre-Turing" if flavour == "open" else self.generation
        return REFUSAL_SOURCES.get((flavour, key), "")

    @property
    def flavours(self) -> tuple[ModuleFlavour, ...]:
        """The flavours known to drive it."""
        return tuple(f for f in ("open", "proprietary") if self.drives(f) == "yes")

    def branch_too_old(self, driver_version: str | None) -> bool:
        """Whether ``driver_version``'s branch predates every release that knows this GPU's generation."""
        branch = driver_branch(driver_version)
        return self.generation == "Blackwell" and branch is not None and branch < BLACKWELL_FIRST_BRANCH

    def dropped(self, driver_version: str | None) -> bool:
        """Whether ``driver_version``'s branch is newer than the last branch that drives this GPU."""
        branch = driver_branch(driver_version)
        return self.last_branch is not None and branch is not None and branch > self.last_branch


def _support(text: str) -> Support:
    return "yes" if text == "yes" else "no" if text == "no" else "unknown"


def gpu_support(device: int) -> GpuSupport | None:
    """What each flavour does with the NVIDIA GPU of PCI device id ``device``; None for an id in no list."""
    # The id lists are searched as text (ids are 4 hex digits, each followed by a space): no table is built.
    wanted = f"{device:04x} "
    for generation, open_, proprietary, ids in GPU_ROWS:
        at = ids.find(wanted)
        while at > 0 and ids[at - 1] != " ":
            at = ids.find(wanted, at + 1)
        if at >= 0:
            last = LAST_BRANCHES.get(generation)
            return GpuSupport(device, generation, _support(open_), _support(proprietary), last)
    return None
