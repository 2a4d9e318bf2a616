"""The NVIDIA GPUs on the PCI bus, from SYSFS_ROOT/bus/pci/devices (reading only).

Why sysfs and not /proc/driver/nvidia/gpus: that directory lists only the GPUs the loaded nvidia module
bound, and its ``information`` file has no PCI device id (NVIDIA/open-gpu-kernel-modules
kernel-open/nvidia/nv-procfs.c @ df1c9a3de2be); a GPU the open modules refuse (pre-Turing) fails the probe
and is seen only here. SR-IOV virtual functions (a ``physfn`` link) are left out, as NVIDIA's own
enumeration does (NVIDIA/go-nvlib pkg/nvpci/nvpci.go ``GetGPUs`` @ 25face2bed12).

Cost on every start: one directory listing and one ``vendor`` read per PCI function (through one
lstat-remembering ``Root``, so the shared path components are looked up once); ``class``, ``device``,
``physfn`` and ``driver`` only for NVIDIA functions.
"""

from __future__ import annotations

import os

from driver_container.errors import HostReadError, Problem
from driver_container.formats.kernel.pci import NVIDIA_VENDOR_ID, PciFunction, is_pci_address, parse_pci_hex
from driver_container.paths import HostPaths, Root
from driver_container.records import NamedRecord

DEVICES = "bus/pci/devices"
ATTRIBUTE_LIMIT = 64  # "0x%06x\n" is 9 bytes; anything longer is not a PCI attribute


class PciGpus(NamedRecord):
    gpus: tuple[PciFunction, ...]  # sorted by address
    problems: tuple[Problem, ...] = ()


def read_pci_gpus(paths: HostPaths) -> PciGpus:
    """Every NVIDIA GPU function (VGA or 3D controller, not a virtual function) below SYSFS_ROOT."""
    root = paths.sys.snapshot()
    problems: list[Problem] = []
    try:
        names = root.listdir(DEVICES)
    except HostReadError as exc:
        return PciGpus((), (Problem.of(exc),))
    gpus: list[PciFunction] = []
    for name in names:
        if not is_pci_address(name):
            continue
        try:
            gpu = _nvidia_gpu(root, name)
        except HostReadError as exc:
            problems.append(Problem.of(exc))
            continue
        if gpu is not None:
            gpus.append(gpu)
    return PciGpus(tuple(gpus), tuple(problems))


def _nvidia_gpu(root: Root, address: str) -> PciFunction | None:
    base = f"{DEVICES}/{address}"
    vendor = _attribute(root, base, "vendor", 4)
    if vendor != NVIDIA_VENDOR_ID:
        return None
    pci_class = _attribute(root, base, "class", 6)
    device = _attribute(root, base, "device", 4)
    if pci_class is None or device is None:
        return None
    gpu = PciFunction(address, vendor, device, pci_class, None)
    if not gpu.is_nvidia_gpu or root.lstat(f"{base}/physfn") is not None:
        return None
    return gpu._replace(driver=_driver(root, base))


def _attribute(root: Root, base: str, name: str, digits: int) -> int | None:
    text = root.read_text_or_none(f"{base}/{name}", limit=ATTRIBUTE_LIMIT)
    if text is None:
        return None
    value = parse_pci_hex(text, digits=digits)
    if value is None:
        where = root.resolve(f"{base}/{name}")
        raise HostReadError(f"{where}: not a PCI id: {text[:20]!r}", path=where)
    return value


def _driver(root: Root, base: str) -> str | None:
    """The bound driver's name: the last component of the ``driver`` link, read, never followed."""
    link = root.resolve(f"{base}/driver", follow_last=False)
    try:
        return os.path.basename(os.readlink(link)) or None
    except (FileNotFoundError, NotADirectoryError, OSError):
        return None
