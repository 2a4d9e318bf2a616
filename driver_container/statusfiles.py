"""The files gpu-operator reads under RUN_DIR (contract: the operator's startup probe and driver manager).

- ``validations/.driver-daemons-status``: the startup probe fails unless it is absent or exactly ``Ready``
  (assets/state-driver/0400_configmap.yaml), so it reads ``NotReady`` from our start until the daemons run.
- ``nvidia-driver.state``: ``DRIVER_CONFIG_DIGEST``; k8s-driver-manager skips its uninstall when it matches.
All written atomically through fsutil (readers see the old or the new content).
"""

from __future__ import annotations

import logging

from driver_container.fsutil import atomic_write_text
from driver_container.paths import HostPaths

log = logging.getLogger(__name__)

DAEMONS_STATUS = ".driver-daemons-status"
READY = "Ready"
NOT_READY = "NotReady"


def write_daemons_status(paths: HostPaths, ready: bool) -> None:
    # No trailing newline: the probe compares `cat` output with "Ready" (shell strips it anyway).
    value = READY if ready else NOT_READY
    atomic_write_text(paths.validations_dir / DAEMONS_STATUS, value, root=paths.run_dir)
    log.info("%s = %s", paths.validations_dir / DAEMONS_STATUS, value)


def read_daemons_status(paths: HostPaths) -> str | None:
    text = paths.run.read_text_or_none(f"validations/{DAEMONS_STATUS}", limit=64)
    return None if text is None else text.strip()


def write_state(paths: HostPaths, digest: str | None) -> None:
    """Record DRIVER_CONFIG_DIGEST when the operator set one (issue: "= DRIVER_CONFIG_DIGEST (when set)")."""
    if not digest:
        log.info("DRIVER_CONFIG_DIGEST not set: %s not written", paths.state_file)
        return
    atomic_write_text(paths.state_file, digest, root=paths.run_dir)
    log.info("%s = %s", paths.state_file, digest)


def read_state(paths: HostPaths) -> str | None:
    text = paths.run.read_text_or_none(paths.state_file.name, limit=4096)
    return None if text is None else text.strip()
