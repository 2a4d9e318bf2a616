"""The order of ``init`` (and ``load``/``unload``): lock, status files, module wait, verify, publish,
/proc and /sys in the root, node steps, daemons, state, wait for a signal.

On Talos the modules belong to machined (talos.md): the runner is narrowed with ``MODULE_TOOLS`` before
any step, so no path - start, signal or error - can run modprobe, rmmod or insmod. Signals only set a
flag and wake the waits through a pipe (``signal.set_wakeup_fd``), so a SIGTERM ends a wait at once and
the cleanup (stop daemons, remove the pid file, keep DRIVER_ROOT but on a final stop: finalstop.py) runs
in ordinary code.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from driver_container.base.errors import (
    DaemonError,
    DriverContainerError,
    HostReadError,
)
from driver_container.base.paths import HostPaths
from driver_container.base.records import NamedRecord
from driver_container.driverroot.procsys import ensure_proc_sys
from driver_container.kube.nodereport import REFUSED, NodeVerdict, report
from driver_container.lifecycle.hostcheck import detect
from driver_container.lifecycle.modwait import POLL_S, PROGRESS_S, required_modules, wait_for_modules
from driver_container.lifecycle.publishing import after_ready, check_and_publish, report_ready, require_usable_root
from driver_container.node import devices, firmware
from driver_container.readers.nvidia_proc import nvswitch_proc_present
from driver_container.runtime import statusfiles
from driver_container.runtime.lock import PidLock
from driver_container.runtime.runner import Runner
from driver_container.runtime.supervise import BackgroundChild, Shutdown
from driver_container.settings import Settings

if TYPE_CHECKING:
    from driver_container.inspect.platform import PlatformInfo
    from driver_container.node.fabricdaemons import FabricDaemons
    from driver_container.node.persistenced import Persistenced

# Function-local imports below keep the hot path light (bench/startup.py): an unchanged Talos
# restart must not import module loading (modprobe/), Fabric Manager or the persistenced client.


log = logging.getLogger(__name__)

T = TypeVar("T")

SOCKET_WAIT_S = 10.0


class InitOptions(NamedRecord):
    no_wait: bool = False
    persistenced_runtime_dir: Path | None = None  # None: persistenced.CONTAINER_RUNTIME_DIR
    poll_s: float = POLL_S
    progress_s: float = PROGRESS_S
    fabric_poll_s: float = 2.0  # nvidia-smi -q while waiting for the fabric (docs/fabric.md)


class _Started:
    """What ``init`` started so far, for the cleanup in ``run_init`` (filled in stage by stage; a plain
    class: a dataclass would cost ~1 ms of every start, see ``resolver.Root``)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.daemon: Persistenced | None = None
        self.fabric: FabricDaemons | None = None
        self.generic_host = False
        self.after_ready: BackgroundChild | None = None  # the check of DRIVER_ROOT after Ready
        self.platform: PlatformInfo | None = None  # detected once, passed to every later step


def run_init_reporting_refusal(
    paths: HostPaths, settings: Settings, runner: Runner, options: InitOptions | None = None
) -> None:
    """``run_init``; a refusal is also shown on the Node (annotation and Event), never masking the error."""
    try:
        run_init(paths, settings, runner, options)
    except DriverContainerError as exc:
        # The Node shows why and what to set (a setting's finding names it and its value).
        reason = f"{exc.message}; fix: {exc.fix}" if exc.fix else exc.message
        report(NodeVerdict(REFUSED, reason=reason), settings.cluster)
        raise


def run_init(paths: HostPaths, settings: Settings, runner: Runner, options: InitOptions | None = None) -> None:
    """The whole ``init``. Returns normally on success and on a termination signal; raises on failure."""
    opts = options or InitOptions()
    shutdown = Shutdown().install()
    lock = PidLock(paths.pid_file, paths.proc)
    started = _Started(runner.stoppable(shutdown))  # a command still running at a signal is killed
    try:
        lock.acquire()
        _init_stages(paths, settings, opts, shutdown, started)
    except DriverContainerError as exc:
        if not shutdown.requested:
            raise
        # The step a signal cut short (a command killed, CommandStopped) fails; init ends as on the signal.
        log.info("%s received during a step: %s", shutdown.describe(), exc.message)
    finally:
        if started.after_ready is not None:
            started.after_ready.kill()  # still checking: a signal or an error ends init now, not after it
        if shutdown.requested:
            log.info("%s received: stopping what init started; %s is kept", shutdown.describe(), paths.driver_root)
        if started.fabric is not None:
            _stop_fabric(started.fabric)
        if started.daemon is not None:
            from driver_container.node import persistenced  # lazy, hot path: see the note above

            persistenced.stop(started.daemon)
        if started.generic_host and shutdown.requested and lock.held:
            from driver_container.lifecycle.generic_host import unload_generic  # lazy, hot path: not on Talos

            unload_generic(paths, settings, started.runner.stoppable(None), started.platform)  # after the signal
        if shutdown.requested and lock.held and not opts.no_wait and settings.cluster.in_cluster:
            from driver_container.lifecycle.finalstop import on_signal  # lazy, hot path: a signal in a cluster only

            on_signal(paths, started.runner.stoppable(None), settings.cluster)  # a final stop unmounts DRIVER_ROOT
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
        from driver_container.lifecycle.generic_host import prepare_generic  # lazy, hot path: not on Talos

        names = prepare_generic(paths, settings, runner, names, info)
    if _interrupted(shutdown, "the module wait"):
        return
    loaded = wait_for_modules(
        paths,
        settings,
        shutdown,
        talos=not started.generic_host,
        poll_s=opts.poll_s,
        progress_s=opts.progress_s,
        names=names,
        talos_version=info.talos_version,
    )
    if loaded is None or _interrupted(shutdown, "verify and publish"):
        return
    published = check_and_publish(paths, settings, runner, shutdown, info, loaded)
    if published is None:
        return
    require_usable_root(paths.driver_root, runner)  # never Ready on a root its consumers cannot execute from
    ensure_proc_sys(paths, runner, settings.root_procfs)  # a read-only sys, no proc unless opted in (procsys.py)
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
        # After Ready: the Node's annotations are not on its critical path; a signal ends the call in flight.
        report_ready(published, settings.cluster, stop=lambda: shutdown.requested)
        return
    log.info("Done, now waiting for signal")
    # Once, in a child: annotate the Node, then (nice 19, SCHED_IDLE) hash the published root against its
    # manifest. Readiness stays Ready whatever it finds: flipping it would restart consumers over a file
    # they may not even load; the error is logged and `status` reports it.
    child = "Node report and root check"
    started.after_ready = BackgroundChild(lambda: after_ready(paths, published, settings.cluster), child)
    _wait_for_signal(paths, shutdown, started.daemon, started.fabric, started.after_ready)


def _node_steps(paths: HostPaths) -> None:
    """Firmware path first: GSP firmware is loaded when a GPU is first opened (persistenced opens them)."""

    firmware.set_firmware_search_path(paths.host_driver_root, paths.sys)
    try:
        nodes = devices.plan_device_nodes(paths.proc) + devices.chroot_nodes(paths.driver_root)
    except HostReadError as exc:
        # Best effort like the firmware path: without nodes the validator falls back to the host's /dev.
        log.warning("device nodes not created: %s", exc.message)
        return
    made = devices.create_device_nodes(paths.driver_root, nodes)
    log.info(
        "device nodes in %s: %d created, %d unchanged, %d not permitted",
        paths.driver_root / "dev",
        len(made.created),
        len(made.unchanged),
        len(made.not_permitted),
    )


def _start_daemons(
    paths: HostPaths, settings: Settings, runner: Runner, opts: InitOptions, shutdown: Shutdown
) -> Persistenced | None:
    from driver_container.node import persistenced  # lazy, hot path: not for --no-wait (see the note above)

    if not persistenced.should_start(paths.host, paths.proc, settings.persistenced, runner):
        return None
    runtime_dir = opts.persistenced_runtime_dir or persistenced.CONTAINER_RUNTIME_DIR
    socket = persistenced.link_runtime_dir(paths.driver_root, runtime_dir)
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


def _check_alive(paths: HostPaths, daemon: Persistenced) -> None:
    code = daemon.exited()
    if code is None:
        return
    from driver_container.node.persistenced import BINARY  # lazy, hot path: see the note above

    statusfiles.write_daemons_status(paths, ready=False)
    raise DaemonError(
        f"{BINARY} (pid {daemon.pid}) exited with status {code}",
        daemon=BINARY,
        pid=daemon.pid,
        returncode=code,
        fix="see its messages above; the pod restarts and init starts it again",
    )


def _start_fabric(
    paths: HostPaths, settings: Settings, runner: Runner, opts: InitOptions, shutdown: Shutdown
) -> FabricDaemons | None:
    """NVSwitch/NVLink5 nodes only (docs/fabric.md): after persistenced, before Ready."""

    if not nvswitch_proc_present(paths.proc):  # one stat on ordinary nodes
        return None
    # Lazy, hot path: NVSwitch and NVLink5 nodes only.
    from driver_container.node import fabricmanager
    from driver_container.readers.fabric import inspect_fabric

    info = inspect_fabric(paths)
    if info is None:
        return None

    return fabricmanager.start(
        paths, settings, runner, info, shutdown, poll_s=opts.fabric_poll_s, progress_s=opts.progress_s
    )


def _stop_fabric(fabric: FabricDaemons) -> None:
    from driver_container.node import fabricdaemons  # lazy, hot path: NVSwitch nodes only

    fabricdaemons.stop_all(fabric)


def _wait_for_signal(
    paths: HostPaths,
    shutdown: Shutdown,
    daemon: Persistenced | None,
    fabric: FabricDaemons | None = None,
    child: BackgroundChild | None = None,
) -> None:
    watched = daemon is not None or (fabric is not None and bool(fabric.started))
    while not _wait(shutdown, POLL_S if watched else 3600.0, child):
        if daemon is not None:
            _check_alive(paths, daemon)
        if fabric is not None:
            try:
                fabric.check_alive()
            except DaemonError:
                statusfiles.write_daemons_status(paths, ready=False)
                raise


def _wait(shutdown: Shutdown, timeout: float, child: BackgroundChild | None) -> bool:
    """``shutdown.wait``, also collecting ``child``'s result when it comes; True once a signal arrived."""
    if child is None or not child.running:
        return shutdown.wait(timeout)
    if shutdown.wait_readable(child.fileno(), timeout):
        child.collect()
    return shutdown.requested
