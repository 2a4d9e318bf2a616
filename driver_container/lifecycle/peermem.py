"""The peermem sidecar's two commands (gpu-operator runs them in ``nvidia-peermem-ctr``).

``probe`` is its startup and liveness probe (every 30 s, failureThreshold 1): NVIDIA's semantics are
"fail only when mlx5_core is loaded and nvidia_peermem is not". It must be fast and never flaky, so this
module imports only the stdlib, paths, the /proc/modules parser and the platform probe at top level;
``reload`` imports the lifecycle lazily.

On Talos nvidia_peermem can never load: there is no MOFED extension, and nvidia-peermem built without
MOFED's peer-memory symbols returns -EINVAL from its init (NVIDIA/open-gpu-kernel-modules
kernel-open/nvidia-peermem/nvidia-peermem.c, ``nv_mem_client_init`` without
NV_MLNX_IB_PEER_MEM_SYMBOLS_PRESENT, 0dd4d36d15d05151a2834c66e47b16a8bed177a8; docs/talos.md section 5). NVIDIA's
probe would then fail the sidecar's liveness forever on every node with a ConnectX NIC, so on Talos the
probe passes and says why, and ``reload`` neither loads nor waits for the module: it waits for the driver
pod, warns once that GPUDirect RDMA on Talos means DMA-BUF, and idles until a signal (a sidecar that
exits would be restarted in a loop).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from driver_container.base.errors import HostReadError, ModuleWaitTimeout
from driver_container.base.paths import HostPaths
from driver_container.formats.kernel.modules import parse_proc_modules
from driver_container.inspect.platform import detect_platform
from driver_container.lifecycle.peermem_glance import MLX5, PEERMEM

if TYPE_CHECKING:
    from driver_container.runtime.runner import Runner
    from driver_container.runtime.supervise import Shutdown
    from driver_container.settings import Settings

log = logging.getLogger(__name__)

TALOS_NO_PEERMEM = (
    "nvidia_peermem cannot load on Talos (no MOFED: its init returns -EINVAL); GPUDirect RDMA there uses "
    "DMA-BUF (CONFIG_DMABUF_MOVE_NOTIFY and CONFIG_PCI_P2PDMA in the amd64 kernel since Talos 1.13) "
    "with the open kernel modules"
)
CTR_READY = ".driver-ctr-ready"  # written by the driver pod's startup probe


def probe(paths: HostPaths) -> tuple[bool, str]:
    """(healthy, reason). Unhealthy only when mlx5_core is loaded and nvidia_peermem is not."""
    try:
        text = paths.proc.read_text_or_none("modules", limit=4 << 20)
    except HostReadError as exc:
        # An unreadable /proc/modules cannot show mlx5_core loaded: NVIDIA's `lsmod | grep` passes too.
        return True, f"{exc.message}: cannot tell, not failing the probe"
    if text is None:
        return True, f"{paths.procfs_root / 'modules'} missing: no loadable modules"
    names = {m.name for m in parse_proc_modules(text)}
    if MLX5 in names and PEERMEM not in names:
        if _on_talos(paths):
            return True, f"{MLX5} is loaded, {PEERMEM} is not and never will be: {TALOS_NO_PEERMEM}"
        return False, f"{MLX5} is loaded but {PEERMEM} is not ({paths.procfs_root / 'modules'})"
    return True, f"{PEERMEM} {'loaded' if PEERMEM in names else 'not needed (no ' + MLX5 + ')'}"


def _on_talos(paths: HostPaths) -> bool:
    # Only asked when the probe would fail; a few small reads (osrelease, os-release), no subprocess.
    return detect_platform(paths).name == "talos"


def run_reload(paths: HostPaths, settings: Settings, runner: Runner) -> None:
    """Wait (bounded) for nvidia_peermem and the driver pod's readiness, then wait for a signal.

    On Talos nothing loads nvidia_peermem (see the module doc): warn and idle. On generic hosts it is
    loaded here through the runner when missing, as NVIDIA's script does.
    """
    # Lazy, hot path: this module is the liveness probe's (every 30 s, bench/startup.py); only ``reload``
    # needs the module wait, the supervisor and modprobe.
    from driver_container.lifecycle import hostcheck, modwait
    from driver_container.runtime.supervise import Shutdown

    info, runner = hostcheck.detect(paths, settings, runner)
    talos = info.name == "talos"
    shutdown = Shutdown().install()
    try:
        if not _wait_ready_file(paths, settings, shutdown):
            return
        if talos and modwait.missing_modules(paths, (PEERMEM,)):
            # Never modprobe (the runner forbids it) and never wait: machined cannot load it either.
            log.warning("%s; not waiting for it (set driver.rdma.enabled=false to drop this sidecar)", TALOS_NO_PEERMEM)
        else:
            if not talos and modwait.missing_modules(paths, (PEERMEM,)):
                from driver_container.modprobe import generic  # lazy, hot path: never on Talos

                params = generic.read_module_params(paths.drivers_conf_dir, "nvidia-peermem")
                runner.run(generic.build_modprobe_argv("nvidia-peermem", params, settings.driver_version))
            if not modwait.wait_for_modules(paths, _only_peermem(settings), shutdown, talos=False, names=(PEERMEM,)):
                return
            log.info("%s loaded; waiting for a signal", PEERMEM)
        while not shutdown.wait(3600.0):
            pass
        log.info("%s received: exiting (modules stay loaded)", shutdown.describe())
    finally:
        shutdown.restore()


def _only_peermem(settings: Settings) -> Settings:

    # required_modules() always includes nvidia and nvidia_uvm; they are loaded before peermem anyway.
    return settings._replace(gpu_direct_rdma=True, nvidia_modeset=False)


def _wait_ready_file(paths: HostPaths, settings: Settings, shutdown: Shutdown) -> bool:

    target = paths.validations_dir / CTR_READY
    deadline = time.monotonic() + settings.module_wait_timeout
    log.info("waiting up to %g s for %s", settings.module_wait_timeout, target)
    while not target.exists():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ModuleWaitTimeout(
                f"{target} did not appear within {settings.module_wait_timeout:g} s",
                timeout=settings.module_wait_timeout,
                fix="check that the driver pod (nvidia-driver-ctr) became ready",
            )
        if shutdown.wait(min(1.0, remaining)):
            return False
    return True
