"""The gpu-operator settings that make the operator's validator wait for a companion module
(docs/operator.md, "Settings"): on Talos they work only where Talos loads that module, and otherwise
``init`` refuses before Ready, naming the setting and the value to use.

Why a refusal and not a warning: the driver pod's startup probe writes ``GPU_DIRECT_RDMA_ENABLED``,
``GDS_ENABLED`` and ``GDRCOPY_ENABLED`` into ``/run/nvidia/validations/.driver-ctr-ready``
(NVIDIA/gpu-operator 10ee5b36, assets/state-driver/0400_configmap.yaml), and the validator's driver
component then waits, without end under ``WITH_WAIT=true``, for ``nvidia_peermem``, ``nvidia_fs`` and
``gdrdrv`` in the loaded modules before it writes ``driver-ready`` (cmd/nvidia-validator/main.go,
``validateAdditionalDriverComponents``). Nothing on a Talos node loads them but the machine config, so a
setting whose module is absent would leave toolkit, device plugin, GFD, DCGM and MIG manager waiting
forever with nothing on the Node to say why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver_container.findings.model import Finding, talos_module_snippet
from driver_container.formats.talos_config import parse_talos_version

if TYPE_CHECKING:
    from driver_container.inspect.hoststate import HostState

NVIDIA_FS, GDRDRV = "nvidia_fs", "gdrdrv"  # inspect.hoststate.COMPANION_MODULES

# GPUDirect RDMA on Talos: no MOFED, so nvidia-peermem's init fails with -EINVAL; the DMA-BUF path needs
# CONFIG_DMABUF_MOVE_NOTIFY and CONFIG_PCI_P2PDMA, both =y in the amd64 kernel since Talos 1.13
# (siderolabs/pkgs kernel/build/config-amd64, f541ca434ee63964319bb912e370f0ed407f8a18).
PEERMEM_ON_TALOS_FIX = (
    "set driver.rdma.enabled=false (ClusterPolicy; NVIDIADriver: spec.rdma.enabled=false): on Talos GPUDirect "
    "RDMA goes through DMA-BUF, which the Talos amd64 kernel (1.13 and later) and the open NVIDIA kernel "
    "modules provide without nvidia_peermem (NCCL/UCX use it when available); do not list nvidia_peermem in "
    "the machine config (machined would retry it forever)"
)
# nvidia-fs.ko ships in both kmod flavours from Talos 1.14 (siderolabs/extensions
# hack/test/exceptions-amd64.yaml at v1.14.0-rc.1), in neither at v1.13.9.
NVIDIA_FS_SINCE = (1, 14)


def _rdma(state: HostState) -> list[Finding]:
    if not state.settings.gpu_direct_rdma or state.modules["nvidia_peermem"].loaded:
        return []
    message = (
        "driver.rdma.enabled=true (GPU_DIRECT_RDMA_ENABLED=true), but nvidia_peermem cannot load on Talos "
        "(no MOFED: its init returns -EINVAL): the operator's validator would wait for it forever and no GPU "
        "operand would start"
    )
    return [Finding("error", "PEERMEM_NOT_ON_TALOS", message, PEERMEM_ON_TALOS_FIX)]


def _ships_nvidia_fs(talos_version: str | None) -> bool | None:
    parsed = parse_talos_version(talos_version)
    return None if parsed is None else parsed[:2] >= NVIDIA_FS_SINCE


def gds_fix(talos_version: str | None) -> str:
    """What to do when gds.enabled is on and Talos has not loaded nvidia_fs."""
    if _ships_nvidia_fs(talos_version) is False:
        off = "set gds.enabled=false (NVIDIADriver: spec.gds.enabled=false)"
        return f"{off}: Talos {talos_version} ships no nvidia-fs.ko"
    snippet = talos_module_snippet(NVIDIA_FS, [], talos_version)
    return (
        f"load nvidia_fs from the kmod extension (Talos 1.14 and later) with {snippet}\nthen reboot, or set "
        "gds.enabled=false (NVIDIADriver: spec.gds.enabled=false)"
    )


def gdrcopy_fix(talos_version: str | None) -> str:
    """What to do when gdrcopy.enabled is on and Talos has not loaded gdrdrv."""
    snippet = talos_module_snippet(GDRDRV, [], talos_version)
    return (
        "install the nvidia-gdrdrv-device extension (it makes /dev/gdrdrv) beside the open kmod extension "
        f"(which ships gdrdrv.ko) and load gdrdrv with {snippet}\nthen reboot, or set gdrcopy.enabled=false "
        "(NVIDIADriver: spec.gdrcopy.enabled=false)"
    )


# module -> (setting, environment variable) of the operator's setting that makes the validator wait for it.
COMPANIONS = {NVIDIA_FS: ("gds.enabled", "GDS_ENABLED"), GDRDRV: ("gdrcopy.enabled", "GDRCOPY_ENABLED")}


def companion_missing(module: str, talos_version: str | None) -> Finding:
    """The refusal for a companion ``module`` the operator's validator would wait for on Talos."""
    setting, env = COMPANIONS[module]
    message = (
        f"{setting}=true ({env}=true), but {module} is not loaded and pods cannot load modules on Talos: "
        "the operator's validator would wait for it forever"
    )
    if module == NVIDIA_FS:
        return Finding("error", "GDS_MODULE_NOT_LOADED", message, gds_fix(talos_version))
    return Finding("error", "GDRCOPY_MODULE_NOT_LOADED", message, gdrcopy_fix(talos_version))


def companion_modules(state: HostState) -> list[Finding]:
    """On Talos: each setting whose module the validator waits for, where that module is not loaded.
    Elsewhere the sidecars load nvidia_peermem, nvidia_fs and gdrdrv themselves after ``init``."""
    if state.platform.name != "talos":
        return []
    wanted = {NVIDIA_FS: state.settings.gds_enabled, GDRDRV: state.settings.gdrcopy_enabled}
    return _rdma(state) + [
        companion_missing(module, state.platform.talos_version)
        for module, on in wanted.items()
        if on and module not in state.companions_loaded
    ]
