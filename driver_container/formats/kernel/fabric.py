"""Pure parsers for NVSwitch / NVLink5 systems: VPD, InfiniBand port attributes, Fabric Manager's
config file and the ``Fabric`` section of ``nvidia-smi -q``. Text or bytes in, typed data out.

Sources:
- NVLink5 marker: NVIDIA/gpu-driver-container ubuntu24.04/nvidia-driver ``_assert_nvlink5_system``
  (commit 06a208c) looks for ``SW_MNG`` in ``/sys/class/infiniband/*/device/vpd``; the Talos extension
  (siderolabs/extensions nvidia-gpu/nvidia-fabricmanager/nvidia-fabricmanager-wrapper/nvswitch.go, commit
  26822f5) matches the full VPD field ``SMDL=SW_MNG`` of the CX7 bridge's limited PF.
- Management port: the same wrapper replicates NVIDIA's ``nvidia-fabricmanager-start.sh``: the first port
  of an LPF device whose GUID is non-zero and whose capability mask lacks IsSMDisabled (0x400). libibumad
  reads both from sysfs (``ports/<n>/cap_mask`` printed in host order, ``ports/<n>/gids/0`` whose last
  64 bits are the port GUID), which is what we parse here.
- Config overrides: ``_configure_fabric_manager`` (same script): ``NVFM_CONFIG_<FIELD>=<value>`` replaces
  the line ``<FIELD>=...`` or appends ``<FIELD>=<value>``; an empty field name is ignored.
- Fabric state: NVML's ``nvmlGpuFabricState`` (Not Supported, Not Started, In Progress, Completed) and the
  probe status (``Success`` or an NVML error), printed by ``nvidia-smi -q`` as ``Fabric`` / ``State`` /
  ``Status`` (NVIDIA Fabric Manager User Guide, "verify the GPU fabric registration").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from driver_container.formats.numbers import is_ascii_name

NVLINK5_VPD_MARKER = b"SW_MNG"
IS_SM_DISABLED = 0x00000400  # IB PortInfo CapabilityMask bit (IBTA vol. 1, 14.2.5.6)

_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")


def is_nvlink5_vpd(vpd: bytes) -> bool:
    """True when a PCI VPD image carries the NVSwitch-management marker of an NVLink5 LPF."""
    return NVLINK5_VPD_MARKER in vpd


def parse_cap_mask(text: str) -> int | None:
    """``ports/<n>/cap_mask`` (``0x2651e848``) as an int; None when malformed."""
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def parse_port_guid(gid0: str) -> int | None:
    """The port GUID: the low 64 bits of ``ports/<n>/gids/0`` (eight groups of 16-bit hex)."""
    groups = gid0.strip().split(":")
    if len(groups) != 8 or not all(1 <= len(g) <= 4 for g in groups):
        return None
    try:
        gid = int("".join(g.rjust(4, "0") for g in groups), 16)  # the whole GID must be hex
    except ValueError:
        return None
    return gid & 0xFFFF_FFFF_FFFF_FFFF


def usable_management_port(guid: int | None, cap_mask: int | None) -> bool:
    return bool(guid) and cap_mask is not None and not cap_mask & IS_SM_DISABLED


def parse_config(text: str) -> dict[str, str]:
    """``FIELD=value`` lines of fabricmanager.cfg (comments and blank lines skipped; last one wins)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#") and is_ascii_name(key.strip()):
            fields[key.strip()] = value.strip()
    return fields


def apply_overrides(text: str, overrides: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> str:
    """``text`` with each ``FIELD=`` line replaced (every occurrence) or, when absent, the field appended."""
    lines = text.splitlines()
    for field, value in overrides:
        hit = False
        for i, line in enumerate(lines):
            if line.startswith(f"{field}="):
                lines[i], hit = f"{field}={value}", True
        if not hit:
            lines += ["", f"{field}={value}"]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class GpuFabric:
    pci_id: str
    state: str  # "Completed" | "In Progress" | "Not Started" | "Not Supported" | "N/A" | other text
    status: str | None  # "Success", an NVML error text, "N/A" or None when not printed

    @property
    def completed(self) -> bool:
        return self.state == "Completed" and self.status in (None, "Success", "N/A")

    @property
    def failed(self) -> bool:
        """Registration ended with an error: waiting longer will not help."""
        return self.state == "Completed" and not self.completed

    @property
    def supported(self) -> bool:
        return self.state not in ("N/A", "Not Supported")


def _key_value(line: str) -> tuple[str, str] | None:
    """``  Key   : value  `` -> (key, value), stripped; None without a colon after at least one character.

    str methods, not a regular expression: the pattern this replaces backtracked cubically on a line of
    blanks (a 2000-blank line of `nvidia-smi -q` output held the fabric wait, and its SIGTERM, for 10 s)."""
    key, sep, value = line.partition(":")
    return (key.strip(), value.strip()) if sep and key else None


def parse_fabric_states(text: str) -> list[GpuFabric]:
    """One ``GpuFabric`` per ``GPU <bus id>`` section that has a ``Fabric`` block with a ``State``."""
    out: list[GpuFabric] = []
    gpu: str | None = None
    fabric_indent: int | None = None
    state: str | None = None
    status: str | None = None

    def flush() -> None:
        if gpu is not None and state is not None:
            out.append(GpuFabric(gpu, state, status))

    for line in text.splitlines():
        if header := _GPU_HEADER.match(line):
            flush()
            gpu, fabric_indent, state, status = header.group(1), None, None, None
            continue
        match = _key_value(line)
        indent = len(line) - len(line.lstrip())
        if gpu is None:
            continue
        if line.strip() == "Fabric":
            fabric_indent = indent
            continue
        if fabric_indent is None or match is None:
            continue
        if indent <= fabric_indent:
            fabric_indent = None  # the next block began
            continue
        key, value = match
        if key == "State" and state is None:
            state = value
        elif key == "Status" and status is None:
            status = value
    flush()
    return out
