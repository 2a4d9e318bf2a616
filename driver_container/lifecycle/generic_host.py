"""``load``, ``unload`` and the generic-host part of ``init``: modprobe there, never on Talos."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from driver_container.base.errors import (
    DriverContainerError,
    ModuleWaitTimeout,
)
from driver_container.base.paths import HostPaths
from driver_container.lifecycle.hostcheck import check_host, detect
from driver_container.lifecycle.modwait import missing_modules, wait_for_modules
from driver_container.modprobe import generic, unload
from driver_container.runtime import statusfiles
from driver_container.runtime.runner import Runner
from driver_container.runtime.supervise import Shutdown
from driver_container.settings import Settings

if TYPE_CHECKING:
    from driver_container.inspect.hoststate import HostState
    from driver_container.inspect.platform import PlatformInfo


log = logging.getLogger(__name__)


def prepare_generic(
    paths: HostPaths,
    settings: Settings,
    runner: Runner,
    names: tuple[str, ...],
    platform: PlatformInfo | None = None,
) -> tuple[str, ...]:
    """Generic hosts (docs/generic-hosts.md): keep loaded modules when the digest matches, else reload them.
    Returns the modules to wait for: nvidia_peermem only where a Mellanox device makes it load."""

    if "nvidia_peermem" in names and not generic.mellanox_present(paths.sys):
        names = tuple(n for n in names if n != "nvidia_peermem")
    digest = settings.driver_config_digest
    # Every module to wait for must be loaded: with only nvidia checked, a dependant removed by hand
    # (nvidia_uvm) would never come back and the wait below would run into MODULE_WAIT_TIMEOUT.
    if digest and statusfiles.read_state(paths) == digest and not missing_modules(paths, names):
        log.info("modules loaded and %s matches DRIVER_CONFIG_DIGEST: userspace-only publish", paths.state_file)
        return names
    unload.unload_modules(paths, settings, runner, platform)
    generic.load_modules(paths, settings, runner, platform)
    return names


def unload_generic(paths: HostPaths, settings: Settings, runner: Runner, platform: PlatformInfo | None = None) -> None:
    try:
        unload.unload_modules(paths, settings, runner, platform)
    except DriverContainerError as exc:
        log.warning("modules left loaded: %s", exc.message)


def run_load(paths: HostPaths, settings: Settings, runner: Runner) -> HostState:
    """``load``: on Talos wait for machined's modules and verify; on generic hosts load them first."""
    info, runner = detect(paths, settings, runner)
    if info.name != "talos":
        generic.load_modules(paths, settings, runner, info)
    shutdown = Shutdown().install()
    try:
        if not wait_for_modules(
            paths, settings, shutdown, talos=info.name == "talos", talos_version=info.talos_version
        ):
            raise ModuleWaitTimeout(f"interrupted by {shutdown.describe()} while waiting for the modules")
    finally:
        shutdown.restore()
    return check_host(paths, settings, info)


def run_unload(paths: HostPaths, settings: Settings, runner: Runner) -> str:
    """``unload``: Talos owns the modules, so this only explains; generic hosts unload (refcount-safe)."""
    info, runner = detect(paths, settings, runner)
    if info.name == "talos":
        return (
            "Talos owns the NVIDIA kernel modules (loaded by machined from the machine config; pods have no "
            "CAP_SYS_MODULE): nothing to unload. Remove them from the machine config (machine.kernel.modules, or the "
            "KernelModuleConfig documents from Talos 1.14) and reboot instead."
        )

    unload.unload_modules(paths, settings, runner, info)
    return "NVIDIA modules unloaded"
