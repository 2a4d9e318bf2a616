"""The NVIDIA GPUs on the PCI bus, from SYSFS_ROOT/bus/pci/devices (reading only).

Why sysfs and not /proc/driver/nvidia/gpus: that directory lists only the GPUs the loaded nvidia module
bound, and its ``information`` file has no PCI device id (NVIDIA/open-gpu-kernel-modules
kernel-open/nvidia/nv-procfs.c @ df1c9a3de2be); a GPU the open modules refuse (pre-Turing) fails the probe
and is seen only here. SR-IOV virtual functions (a ``physfn`` link) are left out, as NVIDIA's own
enumeration does (NVIDIA/go-nvlib pkg/nvpci/nvpci.go ``GetGPUs`` @ 25face2bed12).

Cost on every start: one directory listing and one read of PROCFS_ROOT/bus/pci/devices, whose vendor ids
narrow the sysfs directories read to the NVIDIA functions' (it has no PCI domain, so a match on bus, slot
and function in another domain is read too); per such function one in-root resolution of its directory and
its ``vendor``, ``class``, ``device``, ``physfn`` and ``driver``. Without that file (or with a line it cannot
parse) every function's ``vendor`` is read instead: ~5 ms for 200 functions against ~0.x ms
(docs/development.md "Which module flavour drives which GPU").
"""

from __future__ import annotations

import os

from driver_container.base.errors import HostReadError
from driver_container.base.fileread import converted, open_nofollow, read_up_to, refuse_irregular
from driver_container.base.paths import HostPaths
from driver_container.base.problems import Problem, noted
from driver_container.base.records import NamedRecord
from driver_container.base.resolver import Root
from driver_container.formats.kernel.pci import (
    NVIDIA_VENDOR_ID,
    PciFunction,
    is_pci_address,
    nvidia_functions,
    parse_pci_hex,
)

DEVICES = "bus/pci/devices"  # below SYSFS_ROOT
PROC_DEVICES = "bus/pci/devices"  # below PROCFS_ROOT: every function's vendor in one read
PROC_LIMIT = 1 << 20  # ~190 bytes a function: room for 5000
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
    listed = noted(problems, lambda: paths.proc.read_text_or_none(PROC_DEVICES, limit=PROC_LIMIT), None)
    nvidia = None if listed is None else nvidia_functions(listed)
    gpus: list[PciFunction] = []
    for name in names:
        if (nvidia is not None and name.partition(":")[2] not in nvidia) or not is_pci_address(name):
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
    # The device directory is resolved once, inside the root (the bus/pci/devices entry is a link into
    # devices/); its attributes are then opened directly below it, never following a link.
    directory = os.fspath(root.resolve(f"{DEVICES}/{address}"))
    vendor = _attribute(directory, "vendor", 4)
    if vendor != NVIDIA_VENDOR_ID:
        return None
    pci_class = _attribute(directory, "class", 6)
    device = _attribute(directory, "device", 4)
    if pci_class is None or device is None:
        return None
    gpu = PciFunction(address, vendor, device, pci_class, None)
    if not gpu.is_nvidia_gpu or os.path.lexists(f"{directory}/physfn"):
        return None
    return gpu._replace(driver=_driver(f"{directory}/driver"))


def _attribute(directory: str, name: str, digits: int) -> int | None:
    """A PCI attribute: a regular file (not a link, FIFO or device) of at most ATTRIBUTE_LIMIT bytes, read
    without blocking (base/fileread.py), as resolver.Root.read_bytes reads; None where it does not exist."""
    where = f"{directory}/{name}"
    with converted(where, verb="cannot open"):
        try:
            fd = open_nofollow(where)
        except (FileNotFoundError, NotADirectoryError):
            return None
    refuse_irregular(fd, where)
    try:
        with converted(where):
            data = read_up_to(fd, ATTRIBUTE_LIMIT + 1)
    finally:
        os.close(fd)
    text = data.decode("ascii", errors="replace")
    value = parse_pci_hex(text, digits=digits) if len(data) <= ATTRIBUTE_LIMIT else None
    if value is None:
        raise HostReadError(f"{where}: not a PCI id: {text[:20]!r}", path=where)
    return value


def _driver(link: str) -> str | None:
    """The bound driver's name: the last component of the ``driver`` link, read, never followed."""
    try:
        return os.path.basename(os.readlink(link)) or None
    except OSError:  # no driver bound (absent), or not a link
        return None
