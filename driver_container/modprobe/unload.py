"""Refcount-safe unload on generic hosts: rmmod in dependency order, never while something holds a module."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from driver_container.base.errors import (
    CommandError,
    DriverInUseError,
    ForbiddenCommandError,
    ModuleLoadError,
)
from driver_container.base.paths import HostPaths
from driver_container.inspect.hoststate import LoadedModule, read_loaded_modules
from driver_container.inspect.platform import PlatformInfo
from driver_container.modprobe.generic import refuse_on_talos
from driver_container.runtime.runner import Runner
from driver_container.settings import Settings

log = logging.getLogger(__name__)


# rmmod order: every module before the ones it uses (nvidia_drm uses nvidia_modeset, all use nvidia).
UNLOAD_ORDER = ("nvidia_peermem", "nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia")


# Modules that hold a reference on nvidia when loaded (NVIDIA's refcount rule counts them).
NVIDIA_DEPENDANTS = ("nvidia_uvm", "nvidia_modeset", "nvidia_peermem")


OPEN_FILES = "open /dev/nvidia* files (nvidia-persistenced, nvidia-smi, GPU pods)"


@dataclass(frozen=True)
class UnloadReport:
    unloaded: tuple[str, ...]
    commands: tuple[tuple[str, ...], ...]
    message: str


def _allowed_refs(name: str, module: LoadedModule, present: Mapping[str, LoadedModule]) -> int:
    """References that the unload itself removes: one per holder we unload first. Without holder
    information, NVIDIA's rule: nvidia may be held once by each loaded nvidia_uvm/modeset/peermem."""
    if module.holders:
        return sum(1 for h in module.holders if h in present)
    if name == "nvidia":
        return sum(1 for d in NVIDIA_DEPENDANTS if d in present)
    return 0


def unload_is_safe(
    loaded: Mapping[str, LoadedModule], *, users: Mapping[str, Sequence[str]] | None = None
) -> tuple[bool, str]:
    """NVIDIA's refcount rule, holder-aware: every reference on a module we unload must come from another
    module we unload before it. ``users`` are the /proc/modules users lists (merged with sysfs holders).
    Returns (safe, message); the message names what holds the driver ("driver in use by ...")."""
    present = {n: loaded[n] for n in UNLOAD_ORDER if n in loaded and loaded[n].loaded}
    if not present:
        return True, "no NVIDIA module loaded"
    reasons: list[str] = []
    for name, module in present.items():
        if module.builtin or module.refcnt is None:
            reasons.append(f"{name} (built into the kernel or no module unloading: cannot be removed)")
            continue
        holders = sorted(set(module.holders) | set(module.users) | set((users or {}).get(name, ())))
        foreign = [h for h in holders if h not in present]
        reasons += [f"{h} (uses {name}; not an NVIDIA module this container unloads)" for h in foreign]
        merged = module._replace(holders=tuple(holders))
        unexplained = module.refcnt - _allowed_refs(name, merged, present) - len(foreign)
        if unexplained > 0:
            what = OPEN_FILES if name == "nvidia" else f"open files of {name}"
            reasons.append(f"{unexplained} reference{'s' if unexplained > 1 else ''} to {name} from {what}")
    if reasons:
        return False, "driver in use by " + "; ".join(reasons)
    counts = ", ".join(f"{n} refcnt {m.refcnt}" for n, m in present.items())
    return True, f"only NVIDIA modules hold each other ({counts})"


def unload_modules(
    paths: HostPaths, settings: Settings, runner: Runner, platform: PlatformInfo | None = None
) -> UnloadReport:
    """rmmod nvidia_peermem, nvidia_drm, nvidia_modeset, nvidia_uvm, nvidia (those loaded), only when safe.

    Raises DriverInUseError ("driver in use by ...") before any rmmod when something holds the driver.
    """
    refuse_on_talos(paths, settings, runner, platform)
    loaded = read_loaded_modules(paths).modules
    targets = [n for n in UNLOAD_ORDER if n in loaded and loaded[n].loaded]
    if not targets:
        return UnloadReport((), (), "no NVIDIA module loaded")
    safe, message = unload_is_safe(loaded)  # LoadedModule.users: /proc/modules read once
    if not safe:
        holders = {h for n in targets for h in (*loaded[n].holders, *loaded[n].users) if h not in targets}
        raise DriverInUseError(
            f"cannot unload the NVIDIA modules: {message}",
            holders=tuple(sorted(holders)),
            fix="stop GPU workloads and nvidia-persistenced on the node (or drain it), then restart this pod",
        )
    commands: list[tuple[str, ...]] = []
    for name in targets:
        argv = ("rmmod", name)
        try:
            runner.run(list(argv))
        except ForbiddenCommandError:
            raise
        except CommandError as exc:
            done = ", ".join(c[1] for c in commands) or "nothing"
            raise DriverInUseError(
                f"cannot unload {name}: {exc.message} (already unloaded: {done})",
                argv=exc.argv,
                returncode=exc.returncode,
                fix="something took the driver while unloading; stop it and restart this pod",
            ) from exc
        commands.append(argv)
    left = [n for n, m in read_loaded_modules(paths).modules.items() if n in targets and m.loaded]
    if left:
        raise ModuleLoadError(
            f"rmmod returned 0 but {', '.join(left)} still loaded (/proc/modules, /sys/module)", modules=tuple(left)
        )
    log.info("unloaded %s", ", ".join(targets))
    return UnloadReport(tuple(targets), tuple(commands), f"unloaded {', '.join(targets)} ({message})")
