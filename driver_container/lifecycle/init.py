"""The order of ``init`` (and ``load``/``unload``): lock, status files, module wait, verify, publish,
node steps, daemons, state, wait for a signal.

On Talos the modules belong to machined (talos.md): the runner is narrowed with ``MODULE_TOOLS`` before
any step, so no path - start, signal or error - can run modprobe, rmmod or insmod. Signals only set a
flag and wake the waits through a pipe (``signal.set_wakeup_fd``), so a SIGTERM ends a wait at once and
the cleanup (stop daemons, remove the pid file, keep DRIVER_ROOT) runs in ordinary code.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from driver_container.errors import (
    DaemonError,
    DriverContainerError,
    HostReadError,
    ModuleWaitTimeout,
    VerificationError,
)
from driver_container.node import persistenced
from driver_container.paths import HostPaths
from driver_container.runtime import statusfiles
from driver_container.runtime.lock import PidLock
from driver_container.runtime.runner import MODULE_TOOLS, Runner
from driver_container.runtime.supervise import Shutdown, run_in_child
from driver_container.settings import Settings

if TYPE_CHECKING:
    from driver_container.inspect.hoststate import HostState
    from driver_container.inspect.platform import PlatformInfo
    from driver_container.node.fabricmanager import FabricDaemons

log = logging.getLogger(__name__)

T = TypeVar("T")

POLL_S = 1.0
PROGRESS_S = 10.0
SOCKET_WAIT_S = 10.0


@dataclass(frozen=True)
class InitOptions:
    no_wait: bool = False
    persistenced_runtime_dir: Path = persistenced.CONTAINER_RUNTIME_DIR
    poll_s: float = POLL_S
    progress_s: float = PROGRESS_S
    fabric_poll_s: float = 2.0  # nvidia-smi -q while waiting for the fabric (docs/fabric.md)


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
    from driver_container.formats.talos_config import module_config_snippet

    return module_config_snippet([(n, ()) for n in names], talos_version)


def missing_modules(paths: HostPaths, names: tuple[str, ...]) -> list[str]:
    from driver_container.inspect.hoststate import read_loaded_modules

    problems: list[str] = []
    loaded = read_loaded_modules(paths, problems)
    for problem in problems:
        log.debug("%s", problem)
    missing = []
    for name in names:
        module = loaded.get(name)
        # "Loading"/"coming" is not ready yet; built-in code has no state and counts as loaded.
        live = module is not None and module.loaded and (module.state or "live").lower() == "live"
        if not live:
            missing.append(name)
    return missing


def wait_for_modules(
    paths: HostPaths, settings: Settings, shutdown: Shutdown, *, talos: bool, poll_s: float = POLL_S,
    progress_s: float = PROGRESS_S, names: tuple[str, ...] | None = None, talos_version: str | None = None,
) -> bool:
    """Poll until every required module is live; False when a signal came first; ModuleWaitTimeout."""
    names = names or required_modules(settings, talos=talos)
    start = time.monotonic()
    deadline = start + settings.module_wait_timeout
    next_progress = start + progress_s
    log.info("waiting up to %g s for modules: %s", settings.module_wait_timeout, ", ".join(names))
    while True:
        missing = missing_modules(paths, names)
        if not missing:
            log.info("modules loaded: %s", ", ".join(names))
            return True
        now = time.monotonic()
        if now >= deadline:
            raise _timeout_error(paths, settings, missing, names, talos=talos, talos_version=talos_version)
        if now >= next_progress:
            log.info("still waiting for %s (%.0f s of %g s)", ", ".join(missing), now - start,
                     settings.module_wait_timeout)
            next_progress += progress_s
        if shutdown.wait(min(poll_s, deadline - now)):
            return False


def _timeout_error(
    paths: HostPaths, settings: Settings, missing: list[str], names: tuple[str, ...], *, talos: bool,
    talos_version: str | None = None,
) -> ModuleWaitTimeout:
    message = (
        f"after {settings.module_wait_timeout:g} s these modules are still not loaded: {', '.join(missing)} "
        f"(read {paths.procfs_root / 'modules'} and {paths.sysfs_root / 'module'})"
    )
    if talos:
        from driver_container.formats.talos_config import snippet_heading

        fix = (
            "Talos loads them only from the machine config (then reboot or apply); "
            + snippet_heading(talos_version) + "\n" + machine_config_snippet(names, talos_version)
        )
    else:
        fix = "check `dmesg` for why modprobe did not load them"
    return ModuleWaitTimeout(message, fix=fix)


def verify(paths: HostPaths, settings: Settings) -> HostState:
    """Host-inspection findings; any error stops here, before DRIVER_ROOT is touched."""
    from driver_container.findings import PUBLISH_OUTCOMES, REMEDIED_BY_INIT
    from driver_container.inspect.hoststate import inspect_host

    state = inspect_host(paths, settings)
    # Not reasons to stop: the outcome of an earlier publish (this init redoes it) and what init itself
    # remedies before publishing (DRIVER_ROOT's own mount).
    skipped = PUBLISH_OUTCOMES | REMEDIED_BY_INIT
    errors = [f for f in state.findings if f.severity == "error" and f.code not in skipped]
    for finding in state.findings:
        if finding not in errors:
            level = logging.INFO if finding.severity == "info" else logging.WARNING
            log.log(level, "%s: %s", finding.code, finding.message)
    if errors:
        message = "; ".join(f"{f.code}: {f.message}" for f in errors)
        fixes = "; ".join(dict.fromkeys(f.fix for f in errors if f.fix))
        raise VerificationError(f"verification failed, {paths.driver_root} left untouched: {message}", fix=fixes)
    return state


def loaded_version(state: HostState) -> str:
    from driver_container import findings

    version = findings.loaded_version(state)
    if version is None:
        raise VerificationError(
            f"cannot tell the loaded driver version ({state.driver_root} left untouched): neither "
            "/proc/driver/nvidia/version nor /sys/module/nvidia/version is readable",
            fix="mount the host's /proc and /sys at PROCFS_ROOT and SYSFS_ROOT",
        )
    return version


def detect(paths: HostPaths, settings: Settings, runner: Runner) -> tuple[PlatformInfo, Runner]:
    """The platform, and the runner to use on it (module tools forbidden on Talos)."""
    from driver_container.inspect.platform import detect_platform

    info = detect_platform(paths, settings.driver_platform)
    log.info("platform: %s%s (%s)", info.name, f" {info.talos_version}" if info.talos_version else "", info.evidence)
    if info.name == "talos":
        return info, runner.forbid(MODULE_TOOLS)
    return info, runner


@dataclass
class _Started:
    """What ``init`` started so far, for the cleanup in ``run_init``."""

    runner: Runner
    daemon: persistenced.Persistenced | None = None
    fabric: FabricDaemons | None = None
    generic_host: bool = False


def run_init(paths: HostPaths, settings: Settings, runner: Runner, options: InitOptions | None = None) -> None:
    """The whole ``init``. Returns normally on success and on a termination signal; raises on failure."""
    opts = options or InitOptions()
    shutdown = Shutdown().install()
    lock = PidLock(paths.pid_file)
    started = _Started(runner)
    try:
        lock.acquire()
        _init_stages(paths, settings, opts, shutdown, started)
    finally:
        if shutdown.requested:
            log.info("%s received: stopping what init started; %s is kept", shutdown.describe(), paths.driver_root)
        if started.fabric is not None:
            _stop_fabric(started.fabric)
        if started.daemon is not None:
            persistenced.stop(started.daemon)
        if started.generic_host and shutdown.requested and lock.held:
            _unload_generic(paths, settings, started.runner)
        lock.release()
        shutdown.restore()


def _interrupted(shutdown: Shutdown, before: str) -> bool:
    """A signal ends init between any two stages: nothing after it may start (no daemon, no Ready)."""
    if shutdown.requested:
        log.info("%s received: not starting %s", shutdown.describe(), before)
    return shutdown.requested


def _init_stages(
    paths: HostPaths, settings: Settings, opts: InitOptions, shutdown: Shutdown, started: _Started
) -> None:
    statusfiles.write_daemons_status(paths, ready=False)
    info, runner = detect(paths, settings, started.runner)
    started.runner, started.generic_host = runner, info.name != "talos"
    names = required_modules(settings, talos=not started.generic_host)
    if started.generic_host and not _interrupted(shutdown, "the module reload"):
        names = _prepare_generic(paths, settings, runner, names)
    if _interrupted(shutdown, "the module wait") or not wait_for_modules(
        paths, settings, shutdown, talos=not started.generic_host, poll_s=opts.poll_s,
        progress_s=opts.progress_s, names=names, talos_version=info.talos_version,
    ):  # fmt: skip
        return
    if _interrupted(shutdown, "verify and publish") or not _publish(paths, settings, runner, shutdown):
        return
    if _interrupted(shutdown, "the node steps"):
        return
    _node_steps(paths)
    if _interrupted(shutdown, "the daemons"):
        return
    if opts.no_wait:
        log.info("--no-wait: starting no daemon (nvidia-persistenced, Fabric Manager are left to a waiting init)")
    else:
        started.daemon = _start_daemons(paths, settings, runner, opts, shutdown)
        if _interrupted(shutdown, "Fabric Manager"):
            return
        started.fabric = _start_fabric(paths, settings, runner, opts, shutdown)
    if _interrupted(shutdown, f"writing {statusfiles.READY}"):
        return
    statusfiles.write_state(paths, settings.driver_config_digest)
    statusfiles.write_daemons_status(paths, ready=True)
    if opts.no_wait:
        log.info("Done (--no-wait): driver root published at %s", paths.driver_root)
        return
    log.info("Done, now waiting for signal")
    _wait_for_signal(paths, shutdown, started.daemon, started.fabric)


def _publish(paths: HostPaths, settings: Settings, runner: Runner, shutdown: Shutdown) -> bool:
    """Verify and publish in the child; False when a signal stopped it (the child is killed after a grace)."""
    try:
        done = run_in_child(lambda: _verify_and_publish(paths, settings, runner), shutdown)
    except DriverContainerError:
        if shutdown.requested:
            log.info("%s received while verifying and publishing: stopped", shutdown.describe())
            _undo_interrupted_publish(paths)
            return False
        raise
    if done is None:  # killed after the grace period, maybe mid-commit
        _undo_interrupted_publish(paths)
    return done is not None and not shutdown.requested


def _undo_interrupted_publish(paths: HostPaths) -> None:
    """The publishing child was killed by a signal: roll its commit back now (renames only), so the
    previous root is intact even if no container starts again here."""
    from driver_container.publish.journal import recover

    try:
        recover(paths.driver_root)
    except (DriverContainerError, OSError) as exc:
        log.warning("the interrupted publish is rolled back at the next start: %s", exc)


def _verify_and_publish(paths: HostPaths, settings: Settings, runner: Runner) -> str:
    from driver_container.publish import publish_driver_root

    state = verify(paths, settings)
    version = loaded_version(state)
    publish_driver_root(paths, version, runner)  # logs its own summary
    _report_published(state, version)
    return version


def _report_published(state: HostState, version: str) -> None:
    """Annotate the Node from this (already heavy) child; a no-op outside a cluster, never fatal."""
    from driver_container.manager.nodereport import READY, NodeVerdict, report

    flavour = state.nvidia_version.flavour if state.nvidia_version else None
    report(NodeVerdict(READY, version, flavour, state.module_files_source))


def _node_steps(paths: HostPaths) -> None:
    """Firmware path first: GSP firmware is loaded when a GPU is first opened (persistenced opens them)."""
    from driver_container.node import devices, firmware

    firmware.set_firmware_search_path(paths)
    try:
        nodes = devices.plan_device_nodes(paths)
    except HostReadError as exc:
        # Best effort like the firmware path: without nodes the validator falls back to the host's /dev.
        log.warning("device nodes not created: %s", exc.message)
        return
    report = devices.create_device_nodes(paths.driver_root, nodes)
    log.info(
        "device nodes in %s: %d created, %d unchanged, %d not permitted",
        paths.driver_root / "dev", len(report.created), len(report.unchanged), len(report.not_permitted),
    )


def _start_daemons(
    paths: HostPaths, settings: Settings, runner: Runner, opts: InitOptions, shutdown: Shutdown
) -> persistenced.Persistenced | None:
    if not persistenced.should_start(paths, settings.persistenced, runner):
        return None
    socket = persistenced.link_runtime_dir(paths.driver_root, opts.persistenced_runtime_dir)
    daemon = persistenced.start(runner)
    deadline = time.monotonic() + SOCKET_WAIT_S
    while not socket.exists():
        _check_alive(paths, daemon)
        if time.monotonic() >= deadline:
            log.warning("%s did not create %s within %g s", persistenced.BINARY, socket, SOCKET_WAIT_S)
            break
        if shutdown.wait(0.1):
            break
    return daemon


def _check_alive(paths: HostPaths, daemon: persistenced.Persistenced) -> None:
    code = daemon.exited()
    if code is None:
        return
    statusfiles.write_daemons_status(paths, ready=False)
    raise DaemonError(
        f"{persistenced.BINARY} (pid {daemon.pid}) exited with status {code}",
        fix="see its messages above; the pod restarts and init starts it again",
    )


def _start_fabric(
    paths: HostPaths, settings: Settings, runner: Runner, opts: InitOptions, shutdown: Shutdown
) -> FabricDaemons | None:
    """NVSwitch/NVLink5 nodes only (docs/fabric.md): after persistenced, before Ready."""
    from driver_container.node.fabric import inspect_fabric

    info = inspect_fabric(paths)  # one stat on ordinary nodes
    if info is None:
        return None
    from driver_container.node import fabricmanager

    return fabricmanager.start(paths, settings, runner, info, shutdown, poll_s=opts.fabric_poll_s,
                               progress_s=opts.progress_s)


def _stop_fabric(fabric: FabricDaemons) -> None:
    from driver_container.node import fabricmanager

    fabricmanager.stop_all(fabric)


def _wait_for_signal(
    paths: HostPaths, shutdown: Shutdown, daemon: persistenced.Persistenced | None,
    fabric: FabricDaemons | None = None,
) -> None:
    watched = daemon is not None or (fabric is not None and bool(fabric.started))
    while not shutdown.wait(POLL_S if watched else 3600.0):
        if daemon is not None:
            _check_alive(paths, daemon)
        if fabric is not None:
            try:
                fabric.check_alive()
            except DaemonError:
                statusfiles.write_daemons_status(paths, ready=False)
                raise


def _prepare_generic(
    paths: HostPaths, settings: Settings, runner: Runner, names: tuple[str, ...]
) -> tuple[str, ...]:
    """Generic hosts (issue 8): keep loaded modules when the digest matches, else reload them.
    Returns the modules to wait for: nvidia_peermem only where a Mellanox device makes it load."""
    from driver_container.modprobe import generic

    if "nvidia_peermem" in names and not generic.mellanox_present(paths):
        names = tuple(n for n in names if n != "nvidia_peermem")
    digest = settings.driver_config_digest
    # Every module to wait for must be loaded: with only nvidia checked, a dependant removed by hand
    # (nvidia_uvm) would never come back and the wait below would run into MODULE_WAIT_TIMEOUT.
    if digest and statusfiles.read_state(paths) == digest and not missing_modules(paths, names):
        log.info("modules loaded and %s matches DRIVER_CONFIG_DIGEST: userspace-only publish", paths.state_file)
        return names
    generic.unload_modules(paths, settings, runner)
    generic.load_modules(paths, settings, runner)
    return names


def _unload_generic(paths: HostPaths, settings: Settings, runner: Runner) -> None:
    from driver_container.modprobe import generic

    try:
        generic.unload_modules(paths, settings, runner)
    except DriverContainerError as exc:
        log.warning("modules left loaded: %s", exc.message)


def run_load(paths: HostPaths, settings: Settings, runner: Runner) -> HostState:
    """``load``: on Talos wait for machined's modules and verify; on generic hosts load them first."""
    info, runner = detect(paths, settings, runner)
    if info.name != "talos":
        from driver_container.modprobe import generic

        generic.load_modules(paths, settings, runner)
    shutdown = Shutdown().install()
    try:
        if not wait_for_modules(paths, settings, shutdown, talos=info.name == "talos",
                                talos_version=info.talos_version):
            raise ModuleWaitTimeout(f"interrupted by {shutdown.describe()} while waiting for the modules")
    finally:
        shutdown.restore()
    return verify(paths, settings)


def run_unload(paths: HostPaths, settings: Settings, runner: Runner) -> str:
    """``unload``: Talos owns the modules, so this only explains; generic hosts unload (refcount-safe)."""
    info, runner = detect(paths, settings, runner)
    if info.name == "talos":
        return (
            "Talos owns the NVIDIA kernel modules (loaded by machined from the machine config; pods have no "
            "CAP_SYS_MODULE): nothing to unload. Remove them from the machine config (machine.kernel.modules, or the "
            "KernelModuleConfig documents from Talos 1.14) and reboot instead."
        )
    from driver_container.modprobe import generic

    generic.unload_modules(paths, settings, runner)
    return "NVIDIA modules unloaded"
