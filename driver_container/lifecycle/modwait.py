"""The module wait: which modules a node needs, and polling until the kernel shows them live."""

from __future__ import annotations

import logging
import time

from driver_container.base.errors import (
    ModuleWaitTimeout,
)
from driver_container.base.paths import HostPaths
from driver_container.formats.talos_config import module_config_snippet, snippet_heading
from driver_container.inspect.hoststate import LoadedModules, read_loaded_modules
from driver_container.runtime.supervise import Shutdown
from driver_container.settings import Settings

log = logging.getLogger(__name__)


POLL_S = 1.0


PROGRESS_S = 10.0


def required_modules(settings: Settings, *, talos: bool = False) -> tuple[str, ...]:
    """What Talos must preload: nvidia_uvm always (the validator needs its device major).

    Never nvidia_peermem on Talos: Talos has no MOFED, and NVIDIA's nvidia-peermem built without MOFED's
    peer-memory symbols fails its init with -EINVAL, so machined would retry it forever and a wait for it
    could only time out (docs/talos.md, "GPUDirect RDMA"). findings reports PEERMEM_NOT_ON_TALOS instead."""
    names = ["nvidia", "nvidia_uvm"]
    if settings.nvidia_modeset:
        names.append("nvidia_modeset")
    if settings.gpu_direct_rdma and not talos:
        names.append("nvidia_peermem")
    return tuple(names)


def machine_config_snippet(names: tuple[str, ...], talos_version: str | None = None) -> str:
    """The machine-config text for ``names`` (no parameters) in the form ``talos_version`` supports."""
    return module_config_snippet([(n, ()) for n in names], talos_version)


def missing_modules(paths: HostPaths, names: tuple[str, ...]) -> list[str]:
    return _missing(read_loaded_modules(paths), names)


def _missing(found: LoadedModules, names: tuple[str, ...]) -> list[str]:
    for problem in found.problems:
        log.debug("%s", problem)
    loaded = found.modules
    missing = []
    for name in names:
        module = loaded.get(name)
        # "Loading"/"coming" is not ready yet; built-in code has no state and counts as loaded.
        live = module is not None and module.loaded and (module.state or "live").lower() == "live"
        if not live:
            missing.append(name)
    return missing


def wait_for_modules(
    paths: HostPaths,
    settings: Settings,
    shutdown: Shutdown,
    *,
    talos: bool,
    poll_s: float = POLL_S,
    progress_s: float = PROGRESS_S,
    names: tuple[str, ...] | None = None,
    talos_version: str | None = None,
) -> LoadedModules | None:
    """Poll until every required module is live, then what the last poll read (``inspect_host`` takes it
    instead of reading it again, ~2 ms of every start); None when a signal came first; ModuleWaitTimeout."""
    names = names or required_modules(settings, talos=talos)
    start = time.monotonic()
    deadline = start + settings.module_wait_timeout
    next_progress = start + progress_s
    log.info("waiting up to %g s for modules: %s", settings.module_wait_timeout, ", ".join(names))
    while True:
        found = read_loaded_modules(paths)
        missing = _missing(found, names)
        if not missing:
            log.info("modules loaded: %s", ", ".join(names))
            return found
        now = time.monotonic()
        if now >= deadline:
            raise _timeout_error(paths, settings, missing, names, talos=talos, talos_version=talos_version)
        if now >= next_progress:
            log.info(
                "still waiting for %s (%.0f s of %g s)", ", ".join(missing), now - start, settings.module_wait_timeout
            )
            next_progress += progress_s
        if shutdown.wait(min(poll_s, deadline - now)):
            return None


def _timeout_error(
    paths: HostPaths,
    settings: Settings,
    missing: list[str],
    names: tuple[str, ...],
    *,
    talos: bool,
    talos_version: str | None = None,
) -> ModuleWaitTimeout:
    message = (
        f"after {settings.module_wait_timeout:g} s these modules are still not loaded: {', '.join(missing)} "
        f"(read {paths.procfs_root / 'modules'} and {paths.sysfs_root / 'module'})"
    )
    if talos:
        fix = (
            "Talos loads them only from the machine config (then reboot or apply); "
            + snippet_heading(talos_version)
            + "\n"
            + machine_config_snippet(names, talos_version)
        )
    else:
        fix = "check `dmesg` for why modprobe did not load them"
    return ModuleWaitTimeout(message, modules=tuple(missing), timeout=settings.module_wait_timeout, fix=fix)
