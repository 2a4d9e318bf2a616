"""The architecture of an ELF file from its first 20 bytes (pure; no pyelftools on the status path).

``e_machine`` is the 16-bit field at offset 18 of every ELF header, in the byte order named by
``e_ident[EI_DATA]`` (offset 5: 1 = little, 2 = big endian); System V gABI, "ELF Header".
Values from the gABI's machine table (elf.h): EM_PPC64 21, EM_X86_64 62, EM_AARCH64 183.
"""

from __future__ import annotations

HEADER_BYTES = 20
_MAGIC = b"\x7fELF"
# e_machine -> the architecture name NVIDIA and the kernel print (/proc/driver/nvidia/version, uname -m).
MACHINE_NAMES = {62: "x86_64", 183: "aarch64", 21: "ppc64le"}
# The names /proc/driver/nvidia/version may use for the same machine.
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64", "ppc64": "ppc64le"}


def elf_machine(header: bytes) -> int | None:
    """``e_machine`` of an ELF header, or None when ``header`` is not the start of an ELF file."""
    if len(header) < HEADER_BYTES or not header.startswith(_MAGIC) or header[5] not in (1, 2):
        return None
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")


def machine_name(machine: int | None) -> str | None:
    """``62`` -> ``x86_64``; unknown machines as ``EM_<n>`` so that two different ones still differ."""
    if machine is None:
        return None
    return MACHINE_NAMES.get(machine, f"EM_{machine}")


def normalise_arch(name: str | None) -> str | None:
    return None if not name else _ALIASES.get(name, name)
