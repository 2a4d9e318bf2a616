"""Behaviour knobs read from the environment (the operator's and the user's ``driver.env``).

Paths live in ``paths.HostPaths``; everything else that changes behaviour lives here, parsed once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, TypeVar, get_args

from driver_container.base.errors import UsageError
from driver_container.base.records import NamedRecord
from driver_container.formats.kernel.nvidia_proc import ModuleFlavour
from driver_container.formats.numbers import is_ascii_name, parse_decimal_seconds

# Fixed-choice knobs as Literal types, so mypy checks every comparison with them.
PlatformChoice = Literal["auto", "talos", "generic"]  # DRIVER_PLATFORM
ModuleTypeChoice = Literal["auto", ModuleFlavour]  # KERNEL_MODULE_TYPE
DaemonChoice = Literal["auto", "true", "false"]  # NVIDIA_PERSISTENCED, NVIDIA_FABRICMANAGER
RootProcfsChoice = Literal["none", "mps-minimal"]  # DRIVER_ROOT_PROCFS (driverroot/procsys.py)
# The values each knob accepts, read from its type (get_args), so the two cannot differ.
PLATFORM_CHOICES: tuple[PlatformChoice, ...] = get_args(PlatformChoice)
MODULE_TYPE_CHOICES: tuple[ModuleTypeChoice, ...] = get_args(ModuleTypeChoice)
DAEMON_CHOICES: tuple[DaemonChoice, ...] = get_args(DaemonChoice)
ROOT_PROCFS_CHOICES: tuple[RootProcfsChoice, ...] = get_args(RootProcfsChoice)
_Choice = TypeVar("_Choice", bound=str)

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


def parse_bool(name: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise UsageError(f"{name}={value!r}: expected true or false", name=name, value=value)


def parse_choice(name: str, value: str | None, choices: tuple[_Choice, ...], default: _Choice) -> _Choice:
    if value is None or value.strip() == "":
        return default
    lowered = value.strip().lower()
    for choice in choices:
        if choice == lowered:
            return choice
    raise UsageError(f"{name}={value!r}: expected one of {', '.join(choices)}", name=name, value=value)


def parse_seconds(name: str, value: str | None, default: float) -> float:
    if value is None or value.strip() == "":
        return default
    seconds = parse_decimal_seconds(value.strip())
    if seconds is None:
        raise UsageError(
            f"{name}={value!r}: expected a non-negative number of seconds, e.g. 300 or 1.5", name=name, value=value
        )
    return seconds


class Settings(NamedRecord):
    driver_platform: PlatformChoice = "auto"  # DRIVER_PLATFORM
    driver_version: str | None = None  # DRIVER_VERSION: the version the image claims to ship
    kernel_module_type: ModuleTypeChoice = "auto"  # KERNEL_MODULE_TYPE (operator)
    nvidia_modeset: bool = True  # NVIDIA_MODESET=false: nvidia_modeset not required
    gpu_direct_rdma: bool = False  # GPU_DIRECT_RDMA_ENABLED (operator)
    use_host_mofed: bool = False  # USE_HOST_MOFED (operator)
    gds_enabled: bool = False  # GDS_ENABLED (operator)
    gdrcopy_enabled: bool = False  # GDRCOPY_ENABLED (operator)
    module_wait_timeout: float = 300.0  # MODULE_WAIT_TIMEOUT seconds
    driver_config_digest: str | None = None  # DRIVER_CONFIG_DIGEST (operator)
    persistenced: DaemonChoice = "auto"  # NVIDIA_PERSISTENCED
    fabricmanager: DaemonChoice = "auto"  # NVIDIA_FABRICMANAGER (docs/fabric.md)
    fabric_wait_timeout: float = 600.0  # FABRIC_WAIT_TIMEOUT seconds: FM up and the GPUs' fabric trained
    fabric_overrides: tuple[tuple[str, str], ...] = ()  # NVFM_CONFIG_<FIELD>=<value> (NVIDIA's names)
    root_procfs: RootProcfsChoice = "none"  # DRIVER_ROOT_PROCFS: the DRA driver's chrooted MPS server (docs/mps.md)
    pod_name: str | None = None  # POD_NAME, else HOSTNAME: the pod's name in a pod (kube/ownpod.py)

    def unused_lines(self) -> list[str]:
        """Operator settings this image parses but does not act on, each with what to do instead.
        (GDS_ENABLED and GDRCOPY_ENABLED are acted on: findings/operator.py.)"""
        lines = []
        if self.use_host_mofed:
            lines.append(
                "USE_HOST_MOFED=true has no effect: this image neither waits for MOFED nor loads nvidia_peermem "
                "against it (on Talos there is no MOFED: GPUDirect RDMA goes through DMA-BUF)"
            )
        return lines

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        return cls(
            driver_platform=parse_choice("DRIVER_PLATFORM", e.get("DRIVER_PLATFORM"), PLATFORM_CHOICES, "auto"),
            driver_version=(e.get("DRIVER_VERSION") or "").strip() or None,
            kernel_module_type=parse_choice(
                "KERNEL_MODULE_TYPE", e.get("KERNEL_MODULE_TYPE"), MODULE_TYPE_CHOICES, "auto"
            ),
            nvidia_modeset=parse_bool("NVIDIA_MODESET", e.get("NVIDIA_MODESET"), True),
            gpu_direct_rdma=parse_bool("GPU_DIRECT_RDMA_ENABLED", e.get("GPU_DIRECT_RDMA_ENABLED"), False),
            use_host_mofed=parse_bool("USE_HOST_MOFED", e.get("USE_HOST_MOFED"), False),
            gds_enabled=parse_bool("GDS_ENABLED", e.get("GDS_ENABLED"), False),
            gdrcopy_enabled=parse_bool("GDRCOPY_ENABLED", e.get("GDRCOPY_ENABLED"), False),
            module_wait_timeout=parse_seconds("MODULE_WAIT_TIMEOUT", e.get("MODULE_WAIT_TIMEOUT"), 300.0),
            driver_config_digest=(e.get("DRIVER_CONFIG_DIGEST") or "").strip() or None,
            persistenced=parse_choice("NVIDIA_PERSISTENCED", e.get("NVIDIA_PERSISTENCED"), DAEMON_CHOICES, "auto"),
            fabricmanager=parse_choice("NVIDIA_FABRICMANAGER", e.get("NVIDIA_FABRICMANAGER"), DAEMON_CHOICES, "auto"),
            fabric_wait_timeout=parse_seconds("FABRIC_WAIT_TIMEOUT", e.get("FABRIC_WAIT_TIMEOUT"), 600.0),
            fabric_overrides=fabric_overrides_from_env(e),
            root_procfs=parse_choice("DRIVER_ROOT_PROCFS", e.get("DRIVER_ROOT_PROCFS"), ROOT_PROCFS_CHOICES, "none"),
            pod_name=(e.get("POD_NAME") or "").strip() or (e.get("HOSTNAME") or "").strip() or None,
        )


FABRIC_OVERRIDE_PREFIX = "NVFM_CONFIG_"  # NVIDIA's driver container: NVFM_CONFIG_<FIELD> sets fabricmanager.cfg's FIELD


def fabric_overrides_from_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``NVFM_CONFIG_<FIELD>`` pairs, sorted by field; empty or malformed field names are dropped. Here, not
    in formats/kernel/fabric.py: every start reads the environment, only NVSwitch nodes need the fabric's
    parsers (their import would be ~0.5 ms of every start, bench/startup.py)."""
    pairs = []
    for name, value in env.items():
        field = name[len(FABRIC_OVERRIDE_PREFIX) :] if name.startswith(FABRIC_OVERRIDE_PREFIX) else ""
        if is_ascii_name(field):  # as fabricmanager.cfg's names (formats/kernel/fabric.parse_config)
            # One line per field: a newline in a value would inject another setting.
            pairs.append((field, value.replace("\r", " ").replace("\n", " ")))
    return tuple(sorted(pairs))
