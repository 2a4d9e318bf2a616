"""NVSwitch and NVLink5 systems as seen from /proc, /sys and the image: detection for ``status`` and
``init`` (reading only; the daemons themselves are in ``node/fabricmanager``).

Detection follows NVIDIA's driver container (NVIDIA/gpu-driver-container ubuntu24.04/nvidia-driver,
``_assert_nvlink5_system`` then ``_assert_nvswitch_system``, commit 06a208c): NVLink5 when an InfiniBand
device's VPD carries ``SW_MNG``; otherwise NVSwitch when ``/proc/driver/nvidia-nvswitch/devices/`` is not
empty. The nvidia module creates ``/proc/driver/nvidia-nvswitch`` (open-gpu-kernel-modules
kernel-open/nvidia/procfs_nvswitch.c), so on a node without it nothing else is read: ordinary nodes pay
one stat.

A daemon the host already runs is left alone: a pid file in FABRICMANAGER_RUN_DIR (the host's
/run/nvidia-fabricmanager, where NVIDIA's packages and the Talos extension keep theirs) naming a live
process of that name, a process of that name in /proc (hostPID), or the Talos extension's service
definition under HOST_ROOT_MOUNT (siderolabs/extensions nvidia-gpu/nvidia-fabricmanager, commit 26822f5).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from driver_container.base.errors import HostReadError
from driver_container.base.paths import HostPaths
from driver_container.base.problems import Problem
from driver_container.base.resolver import Root
from driver_container.formats.kernel.fabric import (
    is_nvlink5_vpd,
    parse_cap_mask,
    parse_port_guid,
    usable_management_port,
)
from driver_container.formats.kernel.nvidia_proc import NVSWITCH_PROC_DIR

log = logging.getLogger(__name__)

FM_BINARY = "nv-fabricmanager"
NVLSM_BINARY = "nvlsm"
# Image layout of NVIDIA's packages and redist archives (the Talos extension installs the same paths).
BIN_DIRS = ("usr/bin", "usr/sbin", "usr/local/bin", "opt/nvidia/nvlsm/sbin")
FM_CONFIG = "usr/share/nvidia/nvswitch/fabricmanager.cfg"
NVLSM_CONFIG = "usr/share/nvidia/nvlsm/nvlsm.conf"
PID_FILES = {FM_BINARY: "nv-fabricmanager.pid", NVLSM_BINARY: "nvlsm.pid"}
TALOS_EXTENSION = "usr/local/etc/containers/nvidia-fabricmanager.yaml"  # under HOST_ROOT_MOUNT
NVLINK5_MODULES = ("mlx5_core", "ib_umad")
VPD_LIMIT = 64 * 1024  # PCI VPD is at most 32 KiB (drivers/pci/vpd.c PCI_VPD_MAX_SIZE)
COMM_LEN = 15  # /proc/<pid>/comm is TASK_COMM_LEN - 1 bytes: "nv-fabricmanage"


@dataclass(frozen=True)
class ManagementPort:
    device: str
    port: int
    guid: int

    @property
    def guid_hex(self) -> str:
        return f"0x{self.guid:016x}"


@dataclass(frozen=True)
class HostDaemon:
    name: str
    pid: int | None
    evidence: str


# NVSwitch systems (HGX H100/H200: Fabric Manager) and NVLink5 ones (HGX B200: also NVLSM), docs/fabric.md.
FabricKind = Literal["nvswitch", "nvlink5"]


@dataclass(frozen=True)
class FabricInfo:
    kind: FabricKind
    nvswitch_devices: tuple[str, ...]
    lpf_devices: tuple[str, ...]
    management_port: ManagementPort | None
    missing_modules: tuple[str, ...]  # NVLink5 only: mlx5_core, ib_umad not loaded
    fm_binary: str | None  # absolute path below USERSPACE_ROOT
    nvlsm_binary: str | None
    fm_config: str | None
    nvlsm_config: str | None
    host_daemons: tuple[HostDaemon, ...]
    problems: tuple[Problem, ...] = ()  # unreadable InfiniBand files

    @property
    def needs_nvlsm(self) -> bool:
        return self.kind == "nvlink5"

    def host_runs(self, name: str) -> HostDaemon | None:
        return next((d for d in self.host_daemons if d.name == name), None)

    def to_json(self) -> dict[str, Any]:
        port = self.management_port
        return {
            "kind": self.kind,
            "nvswitch_devices": list(self.nvswitch_devices),
            "lpf_devices": list(self.lpf_devices),
            "management_port": None
            if port is None
            else {
                "device": port.device,
                "port": port.port,
                "guid": port.guid_hex,
            },
            "missing_modules": list(self.missing_modules),
            "image": {
                "nv-fabricmanager": self.fm_binary,
                "nvlsm": self.nvlsm_binary,
                "fabricmanager_cfg": self.fm_config,
                "nvlsm_conf": self.nvlsm_config,
            },
            "daemons": [{"name": d.name, "pid": d.pid, "evidence": d.evidence} for d in self.host_daemons],
        }


class _InfinibandScan:
    """Reads ``class/infiniband`` below SYSFS_ROOT and keeps what it could not read."""

    def __init__(self, sys: Root) -> None:
        self.sys = sys
        self.problems: list[Problem] = []

    def lpf_devices(self) -> list[str]:
        found = []
        for device in self.sys.listdir("class/infiniband"):
            try:
                vpd = self.sys.read_bytes(f"class/infiniband/{device}/device/vpd", limit=VPD_LIMIT)
            except HostReadError as exc:
                if self.sys.exists(f"class/infiniband/{device}/device/vpd"):
                    self.problems.append(Problem.of(exc))
                continue
            if is_nvlink5_vpd(vpd):
                found.append(device)
        return found

    def management_port(self, devices: list[str]) -> ManagementPort | None:
        """The first port of an LPF device usable by NVLSM and FM (nvidia-fabricmanager-start.sh's rule)."""
        for device in devices:
            ports = sorted((p for p in self.sys.listdir(f"class/infiniband/{device}/ports") if p.isdigit()), key=int)
            for port in ports:
                base = f"class/infiniband/{device}/ports/{port}"
                try:
                    cap = parse_cap_mask(self.sys.read_text_or_none(f"{base}/cap_mask", limit=256) or "")
                    guid = parse_port_guid(self.sys.read_text_or_none(f"{base}/gids/0", limit=256) or "")
                except HostReadError as exc:
                    self.problems.append(Problem.of(exc))
                    continue
                if usable_management_port(guid, cap) and guid is not None:
                    return ManagementPort(device, int(port), guid)
        return None


def find_binary(paths: HostPaths, name: str) -> str | None:
    for directory in BIN_DIRS:
        inner = f"{directory}/{name}"
        if paths.userspace.is_file(inner):
            return str(paths.userspace.resolve(inner))
    return None


def _process_name(proc: Root, pid: int) -> str | None:
    try:
        text = proc.read_text_or_none(f"{pid}/comm", limit=64)
    except HostReadError:
        return None
    return None if text is None else text.strip()


def _matches(comm: str | None, name: str) -> bool:
    return comm is not None and comm == name[:COMM_LEN]


def live_pid_file(paths: HostPaths, name: str) -> int | None:
    """The pid in FABRICMANAGER_RUN_DIR/<name>.pid when a process of that name runs with it."""
    try:
        text = paths.fabric_run.read_text_or_none(PID_FILES[name], limit=64)
    except HostReadError:
        return None
    if text is None or not text.strip().isdigit():
        return None
    pid = int(text.strip())
    return pid if _matches(_process_name(paths.proc, pid), name) else None


def host_daemons(paths: HostPaths, *, scan_proc: bool = True) -> tuple[HostDaemon, ...]:
    """Fabric daemons something else already runs (read before init starts its own)."""
    found: dict[str, HostDaemon] = {}
    for name, pid_file in PID_FILES.items():
        pid = live_pid_file(paths, name)
        if pid is not None:
            found[name] = HostDaemon(name, pid, f"{paths.fabric_run_dir / pid_file}")
    if scan_proc and len(found) < len(PID_FILES):
        for entry in paths.proc.listdir("/"):
            if not entry.isdigit():
                continue
            comm = _process_name(paths.proc, int(entry))
            for name in PID_FILES:
                if name not in found and _matches(comm, name):
                    found[name] = HostDaemon(name, int(entry), f"process {entry} in {paths.procfs_root}")
    try:
        talos = paths.host.is_file(TALOS_EXTENSION)
    except HostReadError:
        talos = False
    if talos and FM_BINARY not in found:
        found[FM_BINARY] = HostDaemon(FM_BINARY, None, f"Talos extension {paths.host_root / TALOS_EXTENSION}")
    return tuple(found[n] for n in PID_FILES if n in found)


def _missing_modules(sys: Root) -> tuple[str, ...]:
    # A directory under /sys/module: loaded or built in (NVIDIA's lsmod test would miss built-in ones).
    return tuple(m for m in NVLINK5_MODULES if not sys.is_dir(f"module/{m}"))


def inspect_fabric(paths: HostPaths) -> FabricInfo | None:
    """None on ordinary nodes (no /proc/driver/nvidia-nvswitch, or neither NVSwitch nor NVLink5)."""
    infiniband = _InfinibandScan(paths.sys)
    try:
        if not paths.proc.is_dir(NVSWITCH_PROC_DIR):
            return None
        switches = tuple(paths.proc.listdir(f"{NVSWITCH_PROC_DIR}/devices"))
        lpf = infiniband.lpf_devices()
    except HostReadError as exc:
        log.warning("NVSwitch detection: %s", exc.message)
        return None
    if not lpf and not switches:
        return None
    kind: FabricKind = "nvlink5" if lpf else "nvswitch"
    userspace = paths.userspace
    return FabricInfo(
        kind=kind,
        nvswitch_devices=switches,
        lpf_devices=tuple(lpf),
        management_port=infiniband.management_port(lpf) if lpf else None,
        missing_modules=_missing_modules(paths.sys) if lpf else (),
        fm_binary=find_binary(paths, FM_BINARY),
        nvlsm_binary=find_binary(paths, NVLSM_BINARY),
        fm_config=str(userspace.resolve(FM_CONFIG)) if userspace.is_file(FM_CONFIG) else None,
        nvlsm_config=str(userspace.resolve(NVLSM_CONFIG)) if userspace.is_file(NVLSM_CONFIG) else None,
        host_daemons=host_daemons(paths),
        problems=tuple(infiniband.problems),
    )
