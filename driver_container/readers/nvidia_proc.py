"""``/proc/driver/nvidia``: whether the NVSwitch directory exists and the GPUs the loaded driver lists."""

from __future__ import annotations

from driver_container.base.errors import HostReadError
from driver_container.base.problems import Problem
from driver_container.base.resolver import Root
from driver_container.formats.kernel.nvidia_proc import (
    NVSWITCH_PROC_DIR,
    PCI_ID,
    SMALL,
    GpuInfo,
    GpuList,
    gpu_from_information,
    parse_gpu_information,
)


def nvswitch_proc_present(proc: Root) -> bool:
    """Whether ``/proc/driver/nvidia-nvswitch`` exists: the one look that ``init`` and ``status`` take on an
    ordinary node before importing the fabric code. True when it cannot be read, so that
    ``readers.fabric.inspect_fabric`` reports why."""
    try:
        return proc.is_dir(NVSWITCH_PROC_DIR)
    except HostReadError:
        return True


def read_gpus(proc: Root) -> GpuList:
    """GPUs the loaded driver knows, from ``driver/nvidia/gpus/<pci>/information``, sorted by PCI id."""
    gpus: list[GpuInfo] = []
    problems: list[Problem] = []
    try:
        entries = proc.listdir("driver/nvidia/gpus")
    except HostReadError as exc:
        return GpuList((), (Problem.of(exc),))
    for pci_id in entries:
        if not PCI_ID.fullmatch(pci_id):
            continue
        try:
            text = proc.read_text_or_none(f"driver/nvidia/gpus/{pci_id}/information", limit=SMALL)
        except HostReadError as exc:
            problems.append(Problem.of(exc))
            continue
        if text is not None:
            gpus.append(gpu_from_information(pci_id, parse_gpu_information(text)))
    return GpuList(tuple(gpus), tuple(problems))
