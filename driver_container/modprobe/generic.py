"""Loading and unloading the NVIDIA modules on generic (non-Talos) hosts, as NVIDIA's script does.

Never on Talos: Talos drops CAP_SYS_MODULE from every pod and loads the modules itself (machine
config), so the lifecycle hands Talos a Runner that forbids ``MODULE_TOOLS``; both entry points also
refuse up front when the runner forbids them or the host is detected as Talos, before any command runs.

Every module command goes through the Runner by tool name (``modprobe``, ``rmmod``, ``modinfo``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from driver_container.base.errors import (
    CommandError,
    ForbiddenCommandError,
    ModuleLoadError,
    VerificationError,
)
from driver_container.base.paths import HostPaths
from driver_container.base.problems import Problem
from driver_container.base.resolver import Root
from driver_container.findings import values_equal
from driver_container.formats.modconf import conf_file_name, nvidia_parameters, parse_module_conf
from driver_container.inspect.hoststate import LoadedModule, read_loaded_modules
from driver_container.inspect.platform import PlatformInfo, detect_platform, read_kernel_release
from driver_container.node.firmware import set_firmware_search_path
from driver_container.runtime.runner import MODULE_TOOLS, Runner
from driver_container.settings import Settings

log = logging.getLogger(__name__)

# NVIDIA's script loads these three (never nvidia-drm: it would pin the GPU for the host's console).
BASE_MODULES = ("nvidia", "nvidia-uvm", "nvidia-modeset")
PEERMEM = "nvidia-peermem"
MELLANOX_VENDOR = "0x15b3"  # PCI vendor id of Mellanox/NVIDIA networking (ConnectX, BlueField)


@dataclass(frozen=True)
class LoadReport:
    driver_version: str | None
    basedir: Path | None  # modprobe -d (None: the image's own /lib/modules)
    commands: tuple[tuple[str, ...], ...]
    loaded: tuple[str, ...]  # kernel names loaded by these commands
    already_loaded: tuple[str, ...]  # left as they were (their parameters were NOT applied)
    peermem: str  # why nvidia-peermem was or was not loaded
    firmware_path: str  # node.firmware.FirmwarePathResult value: set, already, other, read-only, missing...
    warnings: tuple[Problem, ...]  # path: the module they are about
    modules: Mapping[str, LoadedModule] = field(default_factory=dict)  # state after loading


def kernel_name(module: str) -> str:
    return module.replace("-", "_")


def refuse_on_talos(paths: HostPaths, settings: Settings, runner: Runner, platform: PlatformInfo | None = None) -> None:
    """Raise ForbiddenCommandError before anything runs when modules are not ours to manage."""
    blocked = sorted(runner.forbidden & MODULE_TOOLS)
    if blocked:
        raise ForbiddenCommandError(
            f"refusing to load or unload modules: this platform forbids {', '.join(blocked)}",
            argv=tuple(blocked),
            fix="on Talos, load modules through the machine config (machine.kernel.modules)",
        )
    platform = platform or detect_platform(paths, settings.driver_platform)
    if platform.name == "talos":
        raise ForbiddenCommandError(
            f"refusing to load or unload modules on Talos ({platform.evidence}): Talos owns the kernel modules",
            argv=tuple(sorted(MODULE_TOOLS)),
            fix="load modules through the Talos machine config; set DRIVER_PLATFORM=generic only on other hosts",
        )


def build_modprobe_argv(
    module: str, params: Sequence[tuple[str, str]], driver_version: str | None, *, basedir: Path | None = None
) -> list[str]:
    """``modprobe [-d DIR] MODULE NAME=VALUE...``; nvidia gets NVIDIA's R580+ coherent-memory default."""
    if kernel_name(module) == "nvidia":
        params = nvidia_parameters(params, driver_version)
    prefix = ["-d", str(basedir)] if basedir is not None else []
    return ["modprobe", *prefix, module, *(f"{name}={value}" for name, value in params)]


def read_module_params(drivers_conf_dir: Path, module: str) -> list[tuple[str, str]]:
    """The operator's DRIVERS_CONF_DIR/<module>.conf (absent file: no parameters)."""
    name = conf_file_name(module)
    text = Root(drivers_conf_dir).read_text_or_none(name, limit=65536)
    return [] if text is None else parse_module_conf(text, source=str(drivers_conf_dir / name))


def mellanox_present(sysfs: Root) -> bool:
    """A Mellanox PCI function exists (NVIDIA loads nvidia-peermem only then)."""
    for device in sysfs.listdir("bus/pci/devices"):
        vendor = sysfs.read_text_or_none(f"bus/pci/devices/{device}/vendor", limit=64)
        if vendor is not None and vendor.strip().lower() == MELLANOX_VENDOR:
            return True
    return False


def module_basedir(paths: HostPaths) -> Path | None:
    """Where modprobe finds the modules: the image's tree for the running kernel, else the host's."""
    kver = read_kernel_release(paths.proc)
    if kver is None:
        log.warning("%s/sys/kernel/osrelease unreadable; modprobe uses its own module tree", paths.procfs_root)
        return None
    candidates = ((paths.userspace, paths.userspace_root), (paths.host, paths.host_root))
    for root, base in candidates:
        if root.is_file(f"lib/modules/{kver}/modules.dep") or root.is_file(f"lib/modules/{kver}/modules.dep.bin"):
            return None if base == Path("/") else base
    raise ModuleLoadError(
        f"no module tree for kernel {kver}: neither {paths.userspace_root}/lib/modules/{kver} (image) nor "
        f"{paths.host_root}/lib/modules/{kver} (host) has a modules.dep",
        fix=f"use an image built for kernel {kver} or install the NVIDIA modules on the host (depmod)",
    )


def module_file_version(runner: Runner, basedir: Path | None) -> str | None:
    """``modinfo -F version nvidia`` from the tree modprobe will load from (None when unknown)."""
    prefix = ["-b", str(basedir)] if basedir is not None else []
    done = runner.run(["modinfo", *prefix, "-F", "version", "nvidia"], check=False)
    version = done.stdout.strip()
    return version if done.returncode == 0 and version else None


def _peermem_decision(sysfs: Root, settings: Settings) -> tuple[bool, str]:
    if not settings.gpu_direct_rdma:
        return False, "not loaded: GPU_DIRECT_RDMA_ENABLED is off"
    if not mellanox_present(sysfs):
        return False, f"not loaded: no Mellanox PCI device (vendor {MELLANOX_VENDOR}) under {sysfs.path}"
    return True, "loaded: GPUDirect RDMA on and a Mellanox device present"


def _set_firmware_path(paths: HostPaths) -> str:
    # Open modules boot GSP from firmware on first GPU open: the path must be set before modprobe.
    return set_firmware_search_path(paths.host_driver_root, paths.sys).result.value


def load_modules(
    paths: HostPaths, settings: Settings, runner: Runner, platform: PlatformInfo | None = None
) -> LoadReport:
    """modprobe nvidia, nvidia-uvm, nvidia-modeset (and nvidia-peermem for RDMA), then verify."""
    refuse_on_talos(paths, settings, runner, platform)
    firmware = _set_firmware_path(paths)
    basedir = module_basedir(paths)
    version = settings.driver_version or module_file_version(runner, basedir)
    wanted = [m for m in BASE_MODULES if m != "nvidia-modeset" or settings.nvidia_modeset]
    peermem, peermem_reason = _peermem_decision(paths.sys, settings)
    if peermem:
        wanted.append(PEERMEM)
    before = read_loaded_modules(paths).modules
    commands: list[tuple[str, ...]] = []
    already: list[str] = []
    warnings: list[Problem] = []
    requested: dict[str, list[tuple[str, str]]] = {}
    if version is None:
        warnings.append(
            Problem(
                "nvidia",
                "driver version unknown (no DRIVER_VERSION, modinfo failed): NVreg_CoherentGPUMemoryMode not added",
            )
        )
    for module in wanted:
        name = kernel_name(module)
        if name in before and before[name].loaded:
            # modprobe would succeed without applying anything: say so instead of pretending.
            already.append(name)
            warnings.append(Problem(name, f"already loaded: parameters from {conf_file_name(module)} not applied"))
            continue
        params = read_module_params(paths.drivers_conf_dir, module)
        if name == "nvidia":
            params = nvidia_parameters(params, version)
        argv = build_modprobe_argv(module, params, version, basedir=basedir)
        run_module_command(runner, argv)
        commands.append(tuple(argv))
        requested[name] = params
    after = read_loaded_modules(paths).modules
    warnings += confirm_loaded(after, [kernel_name(m) for m in wanted], version, requested)
    for warning in warnings:
        log.warning("%s", warning)
    log.info("loaded %s; nvidia-peermem %s", ", ".join(requested) or "nothing", peermem_reason)
    return LoadReport(
        driver_version=version,
        basedir=basedir,
        commands=tuple(commands),
        loaded=tuple(requested),
        already_loaded=tuple(already),
        peermem=peermem_reason,
        firmware_path=firmware,
        warnings=tuple(warnings),
        modules=after,
    )


def run_module_command(runner: Runner, argv: list[str]) -> None:
    try:
        runner.run(argv)
    except ForbiddenCommandError:
        raise
    except CommandError as exc:
        raise ModuleLoadError(
            exc.message,
            argv=exc.argv,
            returncode=exc.returncode,
            fix="see the kernel log (dmesg) on the node for the module's own error",
        ) from exc


def confirm_loaded(
    after: Mapping[str, LoadedModule],
    names: Sequence[str],
    version: str | None,
    requested: Mapping[str, Sequence[tuple[str, str]]],
) -> tuple[Problem, ...]:
    """Raise when a module is missing or has another version; return warnings for parameters not in effect."""
    missing = [n for n in names if not (after.get(n) and after[n].loaded)]
    if missing:
        raise ModuleLoadError(
            f"after modprobe, {', '.join(missing)} not loaded (/proc/modules, /sys/module)",
            modules=tuple(missing),
            fix="see the kernel log (dmesg) on the node",
        )
    expected = version or after["nvidia"].version
    stale = [n for n in names if after[n].version and after[n].version != expected]
    if stale:
        wrong = [f"{n} {after[n].version}" for n in stale]
        raise VerificationError(
            f"loaded modules do not have version {expected}: {', '.join(wrong)}",
            loaded_version=after[stale[0]].version,
            file_version=expected,
            fix="remove stale NVIDIA modules from the module tree and run depmod",
        )
    warnings: list[Problem] = []
    for name, params in requested.items():
        effective = after[name].parameters
        for param, value in params:
            if param in effective and not values_equal(value, effective[param]):
                warnings.append(Problem(name, f"{param} requested {value!r}, in effect {effective[param]!r}"))
    return tuple(warnings)
