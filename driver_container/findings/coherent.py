"""Coherent GPU memory on Grace systems: NVIDIA's driver container loads ``nvidia`` with
``NVreg_CoherentGPUMemoryMode=driver`` on every R580+ driver it builds (NVIDIA/gpu-driver-container
06a208ca, ubuntu22.04/nvidia-driver ``_get_module_params``, since b8f5eaaf), so that a GPU's HBM reached
over NVLink-C2C is not onlined to the OS as a NUMA node (the Kubernetes node would report that memory as
its own). On Talos only the machine config passes module parameters, so nothing asks for it unless the
user does: this check says so.

Facts: the parameter exists from R580 (kernel-open/nvidia/nv-reg.h "CoherentGPUMemoryMode" in
NVIDIA/open-gpu-kernel-modules 580.65.06, absent at 575.64.05); it is a ``charp`` with permission 0, so
only ``/proc/driver/nvidia/params`` shows it, as ``CoherentGPUMemoryMode: "driver"`` (``""`` when unset:
nv-procfs.c ``nv_procfs_read_params``). The GPUs are those of the README's "Compatible GPUs" table at
580.142 whose HBM is coherent over NVLink-C2C: GH200 (10de:2342, 10de:2348), GB200 (10de:2941), GB300
(10de:31c2). GB10 (10de:2e12, DGX Spark) has no memory of its own to online, so it is left out
(https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/issues/1115, NVIDIA's maintainers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver_container.findings.model import Finding, talos_module_snippet
from driver_container.formats.numbers import driver_branch

if TYPE_CHECKING:
    from driver_container.inspect.hoststate import HostState

PARAMETER = "NVreg_CoherentGPUMemoryMode"
WANTED = "driver"
FIRST_BRANCH = 580
COHERENT_GPUS = {0x2342: "GH200", 0x2348: "GH200 144G", 0x2941: "GB200", 0x31C2: "GB300"}


def coherent_memory(state: HostState, loaded_version: str | None) -> list[Finding]:
    """A warning on a Grace node whose R580+ nvidia module runs without ``CoherentGPUMemoryMode=driver``."""
    nvidia = state.modules["nvidia"]
    branch = driver_branch(loaded_version)
    gpus = sorted({COHERENT_GPUS[g.device] for g in state.pci_gpus if g.device in COHERENT_GPUS})
    current = nvidia.parameters.get(PARAMETER)
    if not nvidia.loaded or branch is None or branch < FIRST_BRANCH or not gpus or current is None:
        return []
    value = current.strip().strip('"')
    if value == WANTED:
        return []
    if state.platform.name == "talos":
        fix = talos_module_snippet("nvidia", [f"{PARAMETER}={WANTED}"], state.platform.talos_version)
        fix += "\nthen reboot the node (Talos never reloads a loaded module)"
    else:
        fix = f"add `options nvidia {PARAMETER}={WANTED}` to the host's /etc/modprobe.d/ and reload nvidia"
    return [
        Finding(
            "warning",
            "COHERENT_MEMORY_NOT_DRIVER",
            f"{', '.join(gpus)} with nvidia {loaded_version}: CoherentGPUMemoryMode is {value or 'unset'!s}, so "
            "the OS onlines the GPU memory as a NUMA node and the Kubernetes node reports it as its own memory; "
            f"NVIDIA's driver container loads R580+ with {PARAMETER}={WANTED}",
            fix,
        )
    ]
