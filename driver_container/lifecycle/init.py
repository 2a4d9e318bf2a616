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
)
from driver_container.lifecycle.generic_host import prepare_generic, unload_generic
from driver_container.lifecycle.modwait import POLL_S, PROGRESS_S, required_modules, wait_for_modules
from driver_container.lifecycle.verify import detect, loaded_version, verify
from driver_container.manager.nodereport import READY, NodeVerdict, report
from driver_container.node import devices, fabricmanager, firmware, persistenced
from driver_container.node.fabric import inspect_fabric
from driver_container.paths import HostPaths
from driver_container.publish import publish_driver_root
from driver_container.publish.journal import recover
from driver_container.runtime import statusfiles
from driver_container.runtime.lock import PidLock
from driver_container.runtime.runner import Runner
from driver_container.runtime.supervise import Shutdown, run_in_child
from driver_container.settings import Settings

if TYPE_CHECKING:
    from driver_container.inspect.hoststate import HostState
    from driver_container.inspect.platform import PlatformInfo
    from driver_container.node.fabricmanager import FabricDaemons


log = logging.getLogger(__name__)

T = TypeVar("T")

SOCKET_WAIT_S = 10.0


@dataclass(frozen=True)
class InitOptions:
    no_wait: bool = False
    persistenced_runtime_dir: Path = persistenced.CONTAINER_RUNTIME_DIR
    poll_s: float = POLL_S
    progress_s: float = PROGRESS_S
    fabric_poll_s: float = 2.0  # nvidia-smi -q while waiting for the fabric (docs/fabric.md)


@dataclass
class _Started:
    """What ``init`` started so far, for the cleanup in ``run_init``."""

    runner: Runner
    daemon: persistenced.Persistenced | None = None
    fabric: FabricDaemons | None = None
    generic_host: bool = False
    platform: PlatformInfo | None = None  # detected once, passed to every later step


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
            unload_generic(paths, settings, started.runner, started.platform)
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
    started.runner, started.generic_host, started.platform = runner, info.name != "talos", info
    names = required_modules(settings, talos=not started.generic_host)
    if started.generic_host and not _interrupted(shutdown, "the module reload"):
        names = prepare_generic(paths, settings, runner, names, info)
    if _interrupted(shutdown, "the module wait") or not wait_for_modules(
        paths, settings, shutdown, talos=not started.generic_host, poll_s=opts.poll_s,
        progress_s=opts.progress_s, names=names, talos_version=info.talos_version,
    ):  # fmt: skip
        return
    if _interrupted(shutdown, "verify and publish") or not _publish(paths, settings, runner, shutdown, info):
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


def _publish(
    paths: HostPaths, settings: Settings, runner: Runner, shutdown: Shutdown, platform: PlatformInfo
) -> bool:
    """Verify and publish in the child; False when a signal stopped it (the child is killed after a grace)."""
    try:
        done = run_in_child(lambda: _verify_and_publish(paths, settings, runner, platform), shutdown)
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

    try:
        recover(paths.driver_root)
    except (DriverContainerError, OSError) as exc:
        log.warning("the interrupted publish is rolled back at the next start: %s", exc)


def _verify_and_publish(paths: HostPaths, settings: Settings, runner: Runner, platform: PlatformInfo) -> str:
    state = verify(paths, settings, platform)
    version = loaded_version(state)
    publish_driver_root(paths, version, runner)  # logs its own summary
    _report_published(state, version)
    return version


def _report_published(state: HostState, version: str) -> None:
    """Annotate the Node from this (already heavy) child; a no-op outside a cluster, never fatal."""

    flavour = state.nvidia_version.flavour if state.nvidia_version else None
    report(NodeVerdict(READY, version, flavour, state.module_files_source))


def _node_steps(paths: HostPaths) -> None:
    """Firmware path first: GSP firmware is loaded when a GPU is first opened (persistenced opens them)."""

    firmware.set_firmware_search_path(paths)
    try:
        nodes = devices.plan_device_nodes(paths)
    except HostReadError as exc:
        # Best effort like the firmware path: without nodes the validator falls back to the host's /dev.
        log.warning("device nodes not created: %s", exc.message)
        return
    made = devices.create_device_nodes(paths.driver_root, nodes)
    log.info(
        "device nodes in %s: %d created, %d unchanged, %d not permitted",
        paths.driver_root / "dev", len(made.created), len(made.unchanged), len(made.not_permitted),
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

    info = inspect_fabric(paths)  # one stat on ordinary nodes
    if info is None:
        return None

    return fabricmanager.start(paths, settings, runner, info, shutdown, poll_s=opts.fabric_poll_s,
                               progress_s=opts.progress_s)


def _stop_fabric(fabric: FabricDaemons) -> None:

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


