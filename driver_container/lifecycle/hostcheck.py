"""Detect the platform and check the host (inspect, then findings) before anything is written."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from driver_container import findings
from driver_container.base.errors import (
    VerificationError,
)
from driver_container.base.paths import HostPaths
from driver_container.findings import PUBLISH_OUTCOMES, check
from driver_container.inspect.hoststate import inspect_host
from driver_container.inspect.platform import detect_platform
from driver_container.runtime.runner import MODULE_TOOLS, Runner
from driver_container.settings import Settings

if TYPE_CHECKING:
    from driver_container.inspect.hoststate import HostState, LoadedModules
    from driver_container.inspect.platform import PlatformInfo

log = logging.getLogger(__name__)


def check_host(
    paths: HostPaths, settings: Settings, platform: PlatformInfo | None = None, loaded: LoadedModules | None = None
) -> HostState:
    """Host-inspection findings; any error stops here, before DRIVER_ROOT is touched. ``platform``, ``loaded``:
    what ``detect`` and the module wait found (passed down so one process reads them once)."""

    state = inspect_host(paths, settings, platform, loaded)
    found = check(state)
    # Not a reason to stop: the outcome of an earlier publish (this init redoes it). Whether the root it
    # publishes can be executed from is proven after publishing (publishing.require_usable_root).
    errors = [f for f in found if f.severity == "error" and f.code not in PUBLISH_OUTCOMES]
    for finding in found:
        if finding not in errors:
            level = logging.INFO if finding.severity == "info" else logging.WARNING
            log.log(level, "%s: %s", finding.code, finding.message)
    if errors:
        message = "; ".join(f"{f.code}: {f.message}" for f in errors)
        fixes = "; ".join(dict.fromkeys(f.fix for f in errors if f.fix))
        raise VerificationError(
            f"verification failed, {paths.driver_root} left untouched: {message}",
            codes=tuple(f.code for f in errors),
            loaded_version=findings.loaded_version(state),
            file_version=_file_version(state),
            userspace_version=state.userspace.version,
            fix=fixes,
        )
    return state


def _file_version(state: HostState) -> str | None:
    nvidia = state.module_files.get("nvidia")
    return nvidia.version if nvidia is not None else None


def loaded_version(state: HostState) -> str:

    version = findings.loaded_version(state)
    if version is None:
        raise VerificationError(
            f"cannot tell the loaded driver version ({state.root.path} left untouched): neither "
            "/proc/driver/nvidia/version nor /sys/module/nvidia/version is readable",
            codes=("LOADED_VERSION_UNKNOWN",),
            userspace_version=state.userspace.version,
            fix="mount the host's /proc and /sys at PROCFS_ROOT and SYSFS_ROOT",
        )
    return version


def detect(paths: HostPaths, settings: Settings, runner: Runner) -> tuple[PlatformInfo, Runner]:
    """The platform, and the runner to use on it (module tools forbidden on Talos)."""

    info = detect_platform(paths, settings.driver_platform)
    log.info("platform: %s%s (%s)", info.name, f" {info.talos_version}" if info.talos_version else "", info.evidence)
    if info.name == "talos":
        return info, runner.forbid(MODULE_TOOLS)
    return info, runner
