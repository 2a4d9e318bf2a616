"""Fabric Manager (and, on NVLink5 systems, the NVLink Subnet Manager) started, watched and stopped by
``init`` on NVSwitch nodes, and the wait until the GPUs' fabric is trained.

What NVIDIA's driver container does (NVIDIA/gpu-driver-container ubuntu24.04/nvidia-driver, commit
06a208c, ``_start_daemons``): after nvidia-persistenced, on NVLink5 wait for mlx5_core and ib_umad, apply
``NVFM_CONFIG_<FIELD>`` overrides to fabricmanager.cfg, start NVLSM then FM through
``nvidia-fabricmanager-start.sh`` (pid files ``/var/run/nvidia-fabricmanager/{nv-fabricmanager,nvlsm}.pid``)
and ``nvidia-smi -r`` when ``NVFM_CONFIG_FABRIC_MODE=1`` (88a0ec2); on NVSwitch run
``nv-fabricmanager -c fabricmanager.cfg``; since #908 (223687f) a failed start fails the container.

What we do differently, and why:
- The overrides go into a copy in FABRICMANAGER_RUN_DIR; the image's file is never edited (read-only
  rootfs, and a restart must not apply them twice).
- Both daemons run in the foreground as our children (``DAEMONIZE=0``, as the Talos extension's wrapper
  does: siderolabs/extensions nvidia-gpu/nvidia-fabricmanager/nvidia-fabricmanager-wrapper/main.go,
  26822f5), so a death is seen within a poll and ends ``init``; we start them as that wrapper does
  (nvlsm ``--config --guid --pid_file --log_file``; FM ``--fm-sm-mgmt-port-guid``) and wait for NVLSM's
  fixed socket ``/var/run/nvidia-fabricmanager/fm_sm_ipc.socket`` before starting FM.
- FM's API socket defaults to DRIVER_ROOT/run/nvidia-fabricmanager/socket, where the container toolkit
  looks (NVIDIA/nvidia-container-toolkit internal/discover/ipc.go, d34b304): ``/run`` and ``/var/run``
  below the driver root.
- Ready waits for the fabric: every GPU that reports a fabric state shows ``Completed``/``Success`` in
  ``nvidia-smi -q`` (gpu-operator#2781 had pods Ready with an untrained fabric).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path, PurePosixPath

from driver_container.base.errors import CommandError, DriverContainerError, FabricError
from driver_container.base.paths import HostPaths
from driver_container.formats.kernel.fabric import apply_overrides, parse_config
from driver_container.node.fabricdaemons import Daemon, FabricDaemons, daemons_fix, stop_all, tails
from driver_container.node.fabricwait import wait_for_fabric
from driver_container.readers.fabric import FM_BINARY, FM_CONFIG, NVLSM_BINARY, PID_FILES, FabricInfo, inspect_fabric
from driver_container.runtime.fsutil import atomic_write_text, ensure_dir
from driver_container.runtime.runner import Runner
from driver_container.runtime.supervise import Shutdown
from driver_container.settings import Settings

log = logging.getLogger(__name__)

CONFIG_COPY = "fabricmanager.cfg"  # in FABRICMANAGER_RUN_DIR
SM_SOCKET = "fm_sm_ipc.socket"  # hardcoded in FM under /var/run/nvidia-fabricmanager (Talos wrapper)
SM_SOCKET_WAIT_S = 15.0  # the Talos wrapper's smSocketWait
TOOLKIT_SOCKET = PurePosixPath("run/nvidia-fabricmanager/socket")  # below DRIVER_ROOT
SMI_TIMEOUT_S = 60.0  # nvidia-smi -r


def effective_config(image_text: str, settings: Settings, socket: Path) -> str:
    """The image's fabricmanager.cfg with the NVFM_CONFIG_* overrides, run in the foreground, and the
    API socket where the toolkit looks unless the image or the user chose one."""
    overrides = dict(settings.fabric_overrides)
    if overrides.get("DAEMONIZE", "0") != "0":
        log.warning(
            "NVFM_CONFIG_DAEMONIZE=%s ignored: init supervises Fabric Manager in the foreground", overrides["DAEMONIZE"]
        )
    overrides["DAEMONIZE"] = "0"
    if "FM_CMD_UNIX_SOCKET_PATH" not in overrides and not parse_config(image_text).get("FM_CMD_UNIX_SOCKET_PATH"):
        overrides["FM_CMD_UNIX_SOCKET_PATH"] = str(socket)
    for name, value in sorted(overrides.items()):
        log.info("Fabric Manager config %s=%s", name, value)
    return apply_overrides(image_text, sorted(overrides.items()))


def write_config(paths: HostPaths, info: FabricInfo, settings: Settings) -> Path:
    if info.fm_config is None:
        raise FabricError(
            f"{FM_BINARY} is in the image but not {paths.userspace_root}/usr/share/nvidia/nvswitch/fabricmanager.cfg",
            daemon=FM_BINARY,
            fix="install NVIDIA's fabricmanager package or archive completely (docs/fabric.md)",
        )
    socket = ensure_dir(paths.driver_root, TOOLKIT_SOCKET.parent) / TOOLKIT_SOCKET.name
    image_text = paths.userspace.read_text(FM_CONFIG, limit=1 << 20)
    target = paths.fabric_run_dir / CONFIG_COPY
    atomic_write_text(target, effective_config(image_text, settings, socket), root=paths.fabric_run_dir)
    return target


def _spawn(runner: Runner, log_dir: Path, run_dir: Path, name: str, argv: list[str], logs: tuple[Path, ...]) -> Daemon:
    """``name`` started, its output in FABRICMANAGER_LOG_DIR (``log_dir``), its pid file in FABRICMANAGER_RUN_DIR."""
    output = log_dir / f"{name}.out"
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        process = runner.spawn(argv, output=output)
    except (CommandError, OSError) as exc:
        raise FabricError(
            f"{name}: cannot start: {exc}", daemon=name, fix="check the image's Fabric Manager files"
        ) from exc
    log.info("%s started (pid %d)", name, process.pid)
    return Daemon(name, process, run_dir / PID_FILES[name], (output, *logs))


def _wait_for_file(daemons: FabricDaemons, path: Path, timeout: float, shutdown: Shutdown) -> bool:
    deadline = time.monotonic() + timeout
    while not path.exists():
        daemons.check_alive()
        if time.monotonic() >= deadline:
            log.warning("%s did not appear within %g s: starting %s anyway", path, timeout, FM_BINARY)
            return True
        if shutdown.wait(0.1):
            return False
    return True


def _start_nvlsm(paths: HostPaths, info: FabricInfo, runner: Runner, daemons: FabricDaemons) -> None:
    assert info.nvlsm_binary is not None and info.management_port is not None
    if info.nvlsm_config is None:
        raise FabricError(
            f"{NVLSM_BINARY} is in the image but not its nvlsm.conf",
            daemon=NVLSM_BINARY,
            fix="install NVIDIA's nvlsm package or archive completely (docs/fabric.md)",
        )
    nvlsm_log = paths.fabric_log_dir / "nvlsm.log"
    argv = [
        info.nvlsm_binary,
        "--config",
        info.nvlsm_config,
        "--guid",
        info.management_port.guid_hex,
        "--pid_file",
        str(paths.fabric_run_dir / PID_FILES[NVLSM_BINARY]),
        "--log_file",
        str(nvlsm_log),
    ]
    daemons.started.append(_spawn(runner, paths.fabric_log_dir, paths.fabric_run_dir, NVLSM_BINARY, argv, (nvlsm_log,)))


def _start_fm(paths: HostPaths, info: FabricInfo, settings: Settings, runner: Runner, daemons: FabricDaemons) -> None:
    assert info.fm_binary is not None
    config = write_config(paths, info, settings)
    argv = [info.fm_binary, "-c", str(config)]
    if info.kind == "nvlink5" and info.management_port is not None:
        argv += ["--fm-sm-mgmt-port-guid", info.management_port.guid_hex]
    fm_log = parse_config(config.read_text()).get("LOG_FILE_NAME", "")
    logs = (Path(fm_log),) if fm_log.startswith(str(paths.fabric_log_dir) + "/") else ()
    daemon = _spawn(runner, paths.fabric_log_dir, paths.fabric_run_dir, FM_BINARY, argv, logs)
    daemons.started.append(daemon)
    atomic_write_text(daemon.pid_file, f"{daemon.process.pid}\n", root=paths.fabric_run_dir)


def _wait_for_nvlink5_modules(
    paths: HostPaths, settings: Settings, shutdown: Shutdown, info: FabricInfo, poll_s: float, progress_s: float
) -> FabricInfo | None:
    """NVLSM needs ib_umad (and mlx5_core for the bridge): wait, bounded by MODULE_WAIT_TIMEOUT, then read
    the InfiniBand ports again (they appear with the modules). None when a signal came first."""
    start = time.monotonic()
    next_progress = start + progress_s
    while info.missing_modules or info.management_port is None:
        now = time.monotonic()
        if now - start >= settings.module_wait_timeout:
            what = (
                f"modules {', '.join(info.missing_modules)} not loaded"
                if info.missing_modules
                else f"no usable port on {', '.join(info.lpf_devices)} (GUID set, SM not disabled)"
            )
            raise FabricError(
                f"NVLink5 system: after {settings.module_wait_timeout:g} s {what}",
                daemon=NVLSM_BINARY,
                fix="load mlx5_core, mlx5_ib and ib_umad (Talos: machine.kernel.modules, docs/fabric.md)",
            )
        if now >= next_progress:
            log.info("NVLink5: waiting for %s", ", ".join(info.missing_modules) or "the management port")
            next_progress += progress_s
        if shutdown.wait(poll_s):
            return None
        info = inspect_fabric(paths) or info
    return info


def start(
    paths: HostPaths,
    settings: Settings,
    runner: Runner,
    info: FabricInfo,
    shutdown: Shutdown,
    *,
    poll_s: float,
    progress_s: float,
) -> FabricDaemons | None:
    """Start what the host does not run, then wait for the fabric. None when a signal came first; the
    returned daemons must be stopped (also after an error: ``stop_all`` on the partial set)."""
    daemons = FabricDaemons(info)
    try:
        if not _start_missing(paths, settings, runner, daemons, shutdown, poll_s, progress_s):
            return daemons
        if not wait_for_fabric(
            daemons.check_alive,
            lambda: tails(daemons),
            daemons_fix(daemons.info),
            settings,
            runner,
            shutdown,
            poll_s,
            progress_s,
        ):
            return daemons
    except DriverContainerError:
        stop_all(daemons)
        raise
    return daemons


def _start_missing(
    paths: HostPaths,
    settings: Settings,
    runner: Runner,
    daemons: FabricDaemons,
    shutdown: Shutdown,
    poll_s: float,
    progress_s: float,
) -> bool:
    info = daemons.info
    host_fm = info.host_runs(FM_BINARY)
    if settings.fabricmanager == "false" or host_fm is not None:
        why = "NVIDIA_FABRICMANAGER=false" if host_fm is None else f"the host runs it ({host_fm.evidence})"
        log.info("%s system: not starting %s: %s", info.kind, FM_BINARY, why)
        return True
    if info.fm_binary is None:
        raise FabricError(
            f"{info.kind} system but {FM_BINARY} is not in the image",
            daemon=FM_BINARY,
            fix="use an image built with Fabric Manager (docs/fabric.md)",
        )
    if info.kind == "nvlink5":
        waited = _wait_for_nvlink5_modules(paths, settings, shutdown, info, poll_s, progress_s)
        if waited is None:
            return False
        daemons.info = info = waited
        if info.host_runs(NVLSM_BINARY) is None:
            if info.nvlsm_binary is None:
                raise FabricError(
                    f"NVLink5 system but {NVLSM_BINARY} is not in the image",
                    daemon=NVLSM_BINARY,
                    fix="use an image built with NVLSM (docs/fabric.md)",
                )
            _start_nvlsm(paths, info, runner, daemons)
            if not _wait_for_file(daemons, paths.fabric_run_dir / SM_SOCKET, SM_SOCKET_WAIT_S, shutdown):
                return False
    _start_fm(paths, info, settings, runner, daemons)
    if info.kind == "nvlink5" and dict(settings.fabric_overrides).get("FABRIC_MODE") == "1":
        # NVIDIA 88a0ec2: clear stale partition state after switching to shared-NVSwitch mode.
        log.info("NVFM_CONFIG_FABRIC_MODE=1: resetting the GPUs (nvidia-smi -r)")
        runner.run(["nvidia-smi", "-r"], timeout=SMI_TIMEOUT_S)
    return True
