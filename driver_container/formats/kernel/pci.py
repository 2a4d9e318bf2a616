"""``/sys/bus/pci/devices/<address>/{vendor,device,class}``: pure decoders of the PCI attributes sysfs shows.

Kernel facts (drivers/pci/pci-sysfs.c): ``vendor`` and ``device`` are ``0x%04x``, ``class`` is ``0x%06x``
(base class, subclass, programming interface), each followed by a newline; the directory names are
``dddd:bb:ss.f`` (domain, bus, slot, function). Which NVIDIA functions are GPUs: the classes NVIDIA's
kernel module binds, VGA ``0x030000`` and 3D controller ``0x030200`` with ``class_mask ~0``
(NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-pci-table.c ``nv_pci_table`` @ df1c9a3de2be); NVIDIA's
own library counts the same two as GPUs (NVIDIA/go-nvlib pkg/nvpci/nvpci.go ``IsGPU`` @ 25face2bed12). Every
other NVIDIA function is not: a GPU's HD audio function (class 0x0403), NVSwitch ``0x068000`` (bridge, the
nvswitch entry of the same file's ``nv_module_device_table``), GB10's PCIe root ports ``10de:22ce``/``22d0``
(class 0x0604, canonical/inference-snaps#143).
"""

from __future__ import annotations

from driver_container.base.records import NamedRecord
from driver_container.formats.numbers import parse_uint

NVIDIA_VENDOR_ID = 0x10DE
GPU_CLASSES = (0x030000, 0x030200)  # VGA controller, 3D controller (nv-pci-table.c)
_HEX = "0123456789abcdef"


class PciFunction(NamedRecord):
    address: str  # dddd:bb:ss.f
    vendor: int
    device: int
    pci_class: int
    driver: str | None  # the name of the driver bound to it (the ``driver`` link's last component), if any

    @property
    def is_nvidia_gpu(self) -> bool:
        return self.vendor == NVIDIA_VENDOR_ID and self.pci_class in GPU_CLASSES

    @property
    def pci_id(self) -> str:
        """``10de:2901``, the form lspci -n and NVIDIA's kernel messages print."""
        return f"{self.vendor:04x}:{self.device:04x}"


def parse_pci_hex(text: str, *, digits: int) -> int | None:
    """A sysfs PCI attribute (``0x10de\\n``) as an integer; None unless it is ``0x`` and 1..``digits`` hex
    digits, with at most one trailing newline."""
    body = text[:-1] if text.endswith("\n") else text
    if not body.startswith("0x"):
        return None
    return parse_uint(body[2:], base=16, max_digits=digits)


def is_pci_address(name: str) -> bool:
    """``dddd:bb:ss.f`` in lowercase hex, function 0-7 (no regular expression: read on every start)."""
    domain, _, rest = name.partition(":")
    bus, _, slot_function = rest.partition(":")
    slot, dot, function = slot_function.partition(".")
    return (
        4 <= len(domain) <= 8  # "%04x": VMD domains are 10000 and up
        and len(bus) == 2
        and len(slot) == 2
        and bool(dot)
        and function in tuple("01234567")
        and all(ch in _HEX for ch in domain + bus + slot)
    )


def nvidia_functions(proc_bus_pci_devices: str) -> frozenset[str] | None:
    """``bb:ss.f`` of every NVIDIA function in ``/proc/bus/pci/devices``, the one file that lists all PCI
    functions (Linux drivers/pci/proc.c ``show_device``: ``%02x%02x\t%04x%04x\t...`` = bus, devfn, vendor,
    device, then resources and the driver). It has no PCI domain, so it only narrows which sysfs directories
    are read. None when a line is not of that form (then every directory is read)."""
    found: set[str] = set()
    for line in proc_bus_pci_devices.splitlines():
        location, _, rest = line.partition("\t")
        ids = rest[:8]
        bus, devfn = parse_uint(location[:2], base=16), parse_uint(location[2:], base=16)
        if len(location) != 4 or bus is None or devfn is None or parse_uint(ids, base=16) is None:
            return None
        if int(ids[:4], 16) == NVIDIA_VENDOR_ID:
            found.add(f"{location[:2]}:{devfn >> 3:02x}.{devfn & 7}")
    return frozenset(found)
