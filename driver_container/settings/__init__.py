"""The project's configuration, read from the environment once per process (the operator's and the user's
``driver.env``): ``Settings`` the behaviour knobs and the cluster identity, ``settings/resolve.py`` a whole
command's configuration. Every variable is declared once in ``settings/variables.py``; paths live in
``base/paths.HostPaths``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, get_args

from driver_container.base.records import NamedRecord
from driver_container.formats.kernel.nvidia_proc import ModuleFlavour
from driver_container.formats.numbers import is_ascii_name
from driver_container.settings import variables as v
from driver_container.settings.variables import FABRIC_OVERRIDE_PREFIX, parse_bool, parse_choice, parse_seconds

__all__ = [
    "DAEMON_CHOICES",
    "FABRIC_OVERRIDE_PREFIX",
    "MODULE_TYPE_CHOICES",
    "PLATFORM_CHOICES",
    "ROOT_PROCFS_CHOICES",
    "Cluster",
    "DaemonChoice",
    "ModuleTypeChoice",
    "PlatformChoice",
    "RootProcfsChoice",
    "Settings",
    "fabric_overrides_from_env",
    "parse_bool",
    "parse_choice",
    "parse_seconds",
]

# Fixed-choice knobs as Literal types, so mypy checks every comparison with them.
PlatformChoice = Literal["auto", "talos", "generic"]  # DRIVER_PLATFORM
ModuleTypeChoice = Literal["auto", ModuleFlavour]  # KERNEL_MODULE_TYPE
DaemonChoice = Literal["auto", "true", "false"]  # NVIDIA_PERSISTENCED, NVIDIA_FABRICMANAGER
RootProcfsChoice = Literal["none", "mps-minimal"]  # DRIVER_ROOT_PROCFS (driverroot/procsys.py)
# The values each knob accepts, read from its type (get_args), so the two cannot differ.
PLATFORM_CHOICES: tuple[PlatformChoice, ...] = get_args(PlatformChoice)
MODULE_TYPE_CHOICES: tuple[ModuleTypeChoice, ...] = get_args(ModuleTypeChoice)
DAEMON_CHOICES: tuple[DaemonChoice, ...] = get_args(DaemonChoice)
ROOT_PROCFS_CHOICES: tuple[RootProcfsChoice, ...] = get_args(RootProcfsChoice)


class Cluster(NamedRecord):
    """Who this process is in a cluster and how it reaches the API; all None outside one."""

    node_name: str | None = None  # NODE_NAME
    operator_namespace: str | None = None  # OPERATOR_NAMESPACE as set (kube/endpoint.operator_namespace: the rule)
    pod_name: str | None = None  # POD_NAME, else HOSTNAME: the pod's name in a pod (kube/ownpod.py)
    kubeconfig: str | None = None  # KUBECONFIG
    service_host: str | None = None  # KUBERNETES_SERVICE_HOST
    service_port: str = "443"  # KUBERNETES_SERVICE_PORT

    @property
    def in_cluster(self) -> bool:
        """A Node to name and an API to reach: the node report and the final stop act only then."""
        return self.node_name is not None and (self.service_host is not None or self.kubeconfig is not None)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Cluster:
        return cls(
            node_name=v.text(env, "NODE_NAME"),
            # Unset stays None: the service account's namespace comes first (kube/endpoint.operator_namespace).
            operator_namespace=(env.get("OPERATOR_NAMESPACE") or "").strip() or None,
            pod_name=v.text(env, "POD_NAME") or v.text(env, "HOSTNAME"),
            kubeconfig=v.text(env, "KUBECONFIG"),
            service_host=v.text(env, "KUBERNETES_SERVICE_HOST"),
            service_port=v.text(env, "KUBERNETES_SERVICE_PORT") or "",
        )


class Settings(NamedRecord):
    driver_platform: PlatformChoice = "auto"  # DRIVER_PLATFORM
    driver_version: str | None = None  # DRIVER_VERSION: the version the image claims to ship
    kernel_module_type: ModuleTypeChoice = "auto"  # KERNEL_MODULE_TYPE (operator)
    nvidia_modeset: bool = True  # NVIDIA_MODESET=false: nvidia_modeset not required
    gpu_direct_rdma: bool = False  # GPU_DIRECT_RDMA_ENABLED (operator)
    use_host_mofed: bool = False  # USE_HOST_MOFED (operator)
    gds_enabled: bool = False  # GDS_ENABLED (operator)
    gdrcopy_enabled: bool = False  # GDRCOPY_ENABLED (operator)
    module_wait_timeout: float = 300.0  # MODULE_WAIT_TIMEOUT seconds
    driver_config_digest: str | None = None  # DRIVER_CONFIG_DIGEST (operator)
    persistenced: DaemonChoice = "auto"  # NVIDIA_PERSISTENCED
    fabricmanager: DaemonChoice = "auto"  # NVIDIA_FABRICMANAGER (docs/fabric.md)
    fabric_wait_timeout: float = 600.0  # FABRIC_WAIT_TIMEOUT seconds: FM up and the GPUs' fabric trained
    fabric_overrides: tuple[tuple[str, str], ...] = ()  # NVFM_CONFIG_<FIELD>=<value> (NVIDIA's names)
    root_procfs: RootProcfsChoice = "none"  # DRIVER_ROOT_PROCFS: the DRA driver's chrooted MPS server (docs/mps.md)
    cluster: Cluster = Cluster()  # NODE_NAME, OPERATOR_NAMESPACE, POD_NAME/HOSTNAME, KUBECONFIG, KUBERNETES_SERVICE_*

    @property
    def pod_name(self) -> str | None:
        return self.cluster.pod_name

    def unused_lines(self) -> list[str]:
        """Operator settings this image parses but does not act on, each with what to do instead.
        (GDS_ENABLED and GDRCOPY_ENABLED are acted on: findings/operator.py.)"""
        lines = []
        if self.use_host_mofed:
            lines.append(
                "USE_HOST_MOFED=true has no effect: this image neither waits for MOFED nor loads nvidia_peermem "
                "against it (on Talos there is no MOFED: GPUDirect RDMA goes through DMA-BUF)"
            )
        return lines

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        return cls(
            driver_platform=v.choice(e, "DRIVER_PLATFORM", PLATFORM_CHOICES),
            driver_version=v.text(e, "DRIVER_VERSION"),
            kernel_module_type=v.choice(e, "KERNEL_MODULE_TYPE", MODULE_TYPE_CHOICES),
            nvidia_modeset=v.flag(e, "NVIDIA_MODESET"),
            gpu_direct_rdma=v.flag(e, "GPU_DIRECT_RDMA_ENABLED"),
            use_host_mofed=v.flag(e, "USE_HOST_MOFED"),
            gds_enabled=v.flag(e, "GDS_ENABLED"),
            gdrcopy_enabled=v.flag(e, "GDRCOPY_ENABLED"),
            module_wait_timeout=v.seconds(e, "MODULE_WAIT_TIMEOUT"),
            driver_config_digest=v.text(e, "DRIVER_CONFIG_DIGEST"),
            persistenced=v.choice(e, "NVIDIA_PERSISTENCED", DAEMON_CHOICES),
            fabricmanager=v.choice(e, "NVIDIA_FABRICMANAGER", DAEMON_CHOICES),
            fabric_wait_timeout=v.seconds(e, "FABRIC_WAIT_TIMEOUT"),
            fabric_overrides=fabric_overrides_from_env(e),
            root_procfs=v.choice(e, "DRIVER_ROOT_PROCFS", ROOT_PROCFS_CHOICES),
            cluster=Cluster.from_env(e),
        )


def fabric_overrides_from_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``NVFM_CONFIG_<FIELD>`` pairs, sorted by field; empty or malformed field names are dropped. Here, not
    in formats/kernel/fabric.py: every start reads the environment, only NVSwitch nodes need the fabric's
    parsers (their import would be ~0.5 ms of every start, bench/startup.py)."""
    pairs = []
    for name, value in env.items():
        field = name[len(FABRIC_OVERRIDE_PREFIX) :] if name.startswith(FABRIC_OVERRIDE_PREFIX) else ""
        if is_ascii_name(field):  # as fabricmanager.cfg's names (formats/kernel/fabric.parse_config)
            # One line per field: a newline in a value would inject another setting.
            pairs.append((field, value.replace("\r", " ").replace("\n", " ")))
    return tuple(sorted(pairs))
