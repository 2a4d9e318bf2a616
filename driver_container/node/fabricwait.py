"""The wait before Ready on NVSwitch / NVLink5 nodes: until ``nvidia-smi -q`` shows every GPU's fabric
registration ``Completed`` with ``Success`` (NVML ``nvmlDeviceGetGpuFabricInfo``; GPUs before Hopper
report no state, and then Fabric Manager running is all that can be checked). Polled every few seconds
(``nvidia-smi -q`` on eight GPUs takes about a second), bounded by FABRIC_WAIT_TIMEOUT, with progress logs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from driver_container.base.errors import CommandError, FabricError
from driver_container.formats.kernel.fabric import GpuFabric, parse_fabric_states
from driver_container.readers.fabric import FM_BINARY
from driver_container.runtime.runner import Runner
from driver_container.runtime.supervise import Shutdown
from driver_container.settings import Settings

log = logging.getLogger(__name__)

SMI_TIMEOUT_S = 60.0


def fabric_states(runner: Runner) -> list[GpuFabric] | None:
    """The GPUs' fabric registration from ``nvidia-smi -q``; None when nvidia-smi failed."""
    try:
        done = runner.run(["nvidia-smi", "-q"], timeout=SMI_TIMEOUT_S, check=False)
    except CommandError as exc:
        log.info("fabric state unknown: %s", exc.message)
        return None
    if done.returncode != 0:
        log.info("fabric state unknown: nvidia-smi -q exited %d", done.returncode)
        return None
    return parse_fabric_states(done.stdout)


def _summary(states: list[GpuFabric]) -> str:
    counts: dict[str, int] = {}
    for s in states:
        counts[s.state] = counts.get(s.state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def wait_for_fabric(
    check_alive: Callable[[], None],
    tails: Callable[[], str],
    fix: str,
    settings: Settings,
    runner: Runner,
    shutdown: Shutdown,
    poll_s: float,
    progress_s: float,
) -> bool:
    """Until every GPU that reports a fabric state is Completed/Success; False when a signal came first.
    ``check_alive`` raises when a daemon died; ``tails`` gives their log tails for an error."""
    start = time.monotonic()
    deadline = start + settings.fabric_wait_timeout
    next_progress = start + progress_s
    log.info(
        "waiting up to %g s for the GPUs' fabric (nvidia-smi -q: Fabric State Completed)", settings.fabric_wait_timeout
    )
    while True:
        check_alive()
        states = fabric_states(runner)
        if states is not None:
            failed = [s for s in states if s.failed]
            if failed:
                raise FabricError(
                    "fabric registration failed: "
                    + ", ".join(f"{s.pci_id} status {s.status}" for s in failed)
                    + tails(),
                    daemon=FM_BINARY,
                    fix=fix,
                )
            supported = [s for s in states if s.supported]
            if supported and all(s.completed for s in supported):
                log.info("fabric completed on %d GPU(s)", len(supported))
                return True
            if not supported:
                log.info("no GPU reports a fabric state (before Hopper): Fabric Manager running is the check")
                return True
        now = time.monotonic()
        if now >= deadline:
            seen = _summary(states) if states else "no answer from nvidia-smi -q"
            raise FabricError(
                f"the GPUs' fabric is not completed after {settings.fabric_wait_timeout:g} s ({seen})" + tails(),
                daemon=FM_BINARY,
                fix="raise FABRIC_WAIT_TIMEOUT if training is just slow; " + fix,
            )
        if now >= next_progress:
            log.info(
                "still waiting for the fabric (%s; %.0f s of %g s)",
                _summary(states or []) or "no state",
                now - start,
                settings.fabric_wait_timeout,
            )
            next_progress += progress_s
        if shutdown.wait(min(poll_s, max(deadline - now, 0.0))):
            return False
