"""``/proc/driver/nvidia/{version,params,gpus/*/information}`` (parsers; readers/nvidia_proc.py reads them).

Formats (NVIDIA open-gpu-kernel-modules, nv-procfs.c; fields separated by two spaces):
open:        ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (u@h)  <date>``
proprietary: ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.309.01  Wed Mar 25 15:26:15 UTC 2026``
then ``GCC version:  ...``. Versions have 2 or 3 parts (``515.76``). ``params`` holds the effective
``NVreg_*`` values as ``Name: value`` WITHOUT the ``NVreg_`` prefix (those parameters have permission 0,
so /sys/module/nvidia/parameters does not exist).
"""

from __future__ import annotations

import re
from typing import Literal

from driver_container.base.errors import HostReadError
from driver_container.base.problems import Problem
from driver_container.base.records import NamedRecord
from driver_container.formats.numbers import parse_uint

# Created by the nvidia module on NVSwitch and NVLink5 systems (readers/fabric.py says how each is told apart).
NVSWITCH_PROC_DIR = "driver/nvidia-nvswitch"


_NVRM = re.compile(
    r"NVRM version:\s+NVIDIA UNIX\s+(?P<kind>Open Kernel Module for (?P<arch1>\S+)|(?P<arch2>\S+) Kernel Module)"
    r"\s+(?P<version>[0-9]+\.[0-9]+(?:\.[0-9]+)?)(?=\s|$)(?P<rest>.*)"
)
PCI_ID = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
SMALL = 64 * 1024


# The two builds of NVIDIA's kernel modules: the open GPU kernel modules and the proprietary ones.
ModuleFlavour = Literal["open", "proprietary"]


class NvidiaProcVersion(NamedRecord):
    version: str
    flavour: ModuleFlavour
    arch: str
    build: str  # the rest of the NVRM line (build type, builder, date), stripped
    gcc_version: str | None
    nvrm_line: str


class GpuInfo(NamedRecord):
    pci_id: str
    model: str | None
    uuid: str | None
    device_minor: int | None
    fields: dict[str, str]


def parse_nvidia_version(text: str) -> NvidiaProcVersion:
    """Parse ``/proc/driver/nvidia/version``; raises HostReadError without a recognisable NVRM line."""
    nvrm = gcc = None
    for line in text.splitlines():
        if nvrm is None and (match := _NVRM.search(line)):
            nvrm = (match, line.strip())
        elif line.startswith("GCC version:"):
            gcc = line.partition(":")[2].strip() or None
    if nvrm is None:
        first = text.strip().splitlines()[0][:120] if text.strip() else "(empty)"
        raise HostReadError(
            f"no 'NVRM version: NVIDIA UNIX ... Kernel Module <version>' line (first line: {first!r})",
            fix="check that PROCFS_ROOT is the host's /proc and the nvidia module is loaded",
        )
    match, line = nvrm
    open_kind = match.group("kind").startswith("Open")
    return NvidiaProcVersion(
        version=match.group("version"),
        flavour="open" if open_kind else "proprietary",
        arch=match.group("arch1") or match.group("arch2") or "",
        build=match.group("rest").strip(),
        gcc_version=gcc,
        nvrm_line=line,
    )


def _colon_pairs(text: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            result[key.strip()] = value.strip()
    return result


def parse_nvidia_params(text: str) -> dict[str, str]:
    """``Name: value`` lines -> {Name: value}; lines without a colon are ignored."""
    return {k: v for k, v in _colon_pairs(text).items() if re.fullmatch(r"[A-Za-z0-9_]+", k)}


def parse_gpu_information(text: str) -> dict[str, str]:
    """``Key: \\t value`` lines of a GPU's ``information`` file, split at the first colon."""
    return _colon_pairs(text)


def gpu_from_information(pci_id: str, fields: dict[str, str]) -> GpuInfo:
    minor_text = fields.get("Device Minor", "")
    return GpuInfo(
        pci_id=pci_id,
        model=fields.get("Model") or None,
        uuid=fields.get("GPU UUID") or None,
        device_minor=parse_uint(minor_text),
        fields=fields,
    )


class GpuList(NamedRecord):
    gpus: tuple[GpuInfo, ...]  # sorted by PCI id
    problems: tuple[Problem, ...] = ()  # GPU directories or files that could not be read
