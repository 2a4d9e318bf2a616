"""``nvidia-gds-driver install`` and ``nvidia-gdrcopy-driver install``: the operator's GDS and GDRCopy
sidecars, with this image as their image, on Talos.

gpu-operator renders the sidecars ``nvidia-fs-ctr`` and ``nvidia-gdrcopy-ctr`` with a fixed command that no
CR field changes (NVIDIA/gpu-operator 10ee5b36, controllers/object_controls.go ``transformGDSContainer`` and
``transformGDRCopyContainer``; the CRDs' ``args`` are not read): ``bash -xc "until [ -d
/run/nvidia/driver/usr/src ] && lsmod | grep nvidia; do ...; sleep 10; done; exec nvidia-gds-driver
install"`` (``nvidia-gdrcopy-driver install``), with the startup probe ``lsmod | grep nvidia_fs``
(``gdrdrv``). Only the image (repository, image, version) and env can be set. NVIDIA's images then build
and load the module, which a Talos pod can never do; Talos loads ``nvidia_fs`` (kmod extension, 1.14 and
later) and ``gdrdrv`` (open kmod extension) itself from the machine config. So with this image as the
sidecar image, ``install`` checks that Talos loaded the module and holds the container up until a signal;
it builds and loads nothing. The published root has an empty ``usr/src`` for the loop above.
"""

from __future__ import annotations

import logging

from driver_container.base.errors import VerificationError
from driver_container.base.paths import HostPaths
from driver_container.findings.operator import companion_missing
from driver_container.inspect.hoststate import read_loaded_modules
from driver_container.inspect.platform import detect_platform
from driver_container.runtime.supervise import Shutdown
from driver_container.settings import Settings

log = logging.getLogger(__name__)

# The NVIDIA images these commands stand in for, for the message on hosts where they are the right choice.
NVIDIA_IMAGES = {"nvidia_fs": "nvcr.io/nvidia/cloud-native/nvidia-fs", "gdrdrv": "nvcr.io/nvidia/cloud-native/gdrdrv"}


def run_companion(paths: HostPaths, settings: Settings, module: str, shutdown: Shutdown | None = None) -> None:
    """Refuse unless Talos loaded ``module``; then wait for a signal (a sidecar that exits is restarted)."""
    info = detect_platform(paths, settings.driver_platform)
    if info.name != "talos":
        raise VerificationError(
            f"this image builds and loads no {module}: it stands in for NVIDIA's sidecar on Talos only "
            f"({info.evidence})",
            codes=("COMPANION_NOT_TALOS",),
            fix=f"on this host use NVIDIA's image {NVIDIA_IMAGES[module]} for the sidecar (the chart's default)",
        )
    if module not in read_loaded_modules(paths).companions:  # /proc/modules, as the probe's lsmod reads it
        finding = companion_missing(module, info.talos_version)
        raise VerificationError(finding.message, codes=(finding.code,), fix=finding.fix)
    log.info("%s is loaded (Talos loaded it from the machine config): nothing to build or load; waiting", module)
    shutdown = shutdown or Shutdown().install()
    try:
        while not shutdown.wait(3600.0):
            pass
        log.info("%s received: exiting (%s stays loaded)", shutdown.describe(), module)
    finally:
        shutdown.restore()
