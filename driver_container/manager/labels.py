"""The node labels the driver-manager pauses and restores, as the stock k8s-driver-manager does."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)


PAUSED = "paused-for-driver-upgrade"  # value the stock manager and upgrade controller use


DRIVER_DEPLOY_LABEL = "nvidia.com/gpu.deploy.driver"


PRE_INSTALLED = "pre-installed"  # the operator stops scheduling its driver pod on such a node


def relabel_command(node: str) -> str:
    """What gives a node labelled ``pre-installed`` back to the driver container once the host's userspace
    is gone. Nothing else does: gpu-operator sets a deploy label only when it is missing or empty
    (NVIDIA/gpu-operator 10ee5b36 controllers/state_manager.go ``addGPUStateLabels``), the driver DaemonSet
    selects ``true`` (assets/state-driver/0500_daemonset.yaml, manifests/state-driver/0500_daemonset.yaml),
    and no pod of ours runs on the node again to notice."""
    return f"kubectl label node {node} {DRIVER_DEPLOY_LABEL}=true --overwrite"


# Operand deploy label -> ``app`` label of its pods whose end is waited for (None: paused, not waited for).
# The stock manager's lists, NVIDIA/k8s-driver-manager v0.12.0 (bd62ca7d) cmd/driver-manager/main.go
# fetchCurrentLabels, evictAllGPUOperatorComponents and waitForPodsToTerminate.
CLIENT_LABEL = "nvidia.com/gpu.deploy.client"  # user GPU clients: their DaemonSets select on this key


DRA_DRIVER_LABEL = "nvidia.com/gpu.deploy.dra-driver"  # the DRA kubelet plugin: paused last (evictKubeletPlugin)


DRA_PLUGIN_APP = "nvidia-dra-driver-kubelet-plugin"


OPERANDS: dict[str, str | None] = {
    "nvidia.com/gpu.deploy.operator-validator": "nvidia-operator-validator",
    "nvidia.com/gpu.deploy.container-toolkit": "nvidia-container-toolkit-daemonset",
    "nvidia.com/gpu.deploy.device-plugin": "nvidia-device-plugin-daemonset",
    "nvidia.com/gpu.deploy.gpu-feature-discovery": "gpu-feature-discovery",
    "nvidia.com/gpu.deploy.dcgm-exporter": "nvidia-dcgm-exporter",
    "nvidia.com/gpu.deploy.dcgm": "nvidia-dcgm",
    "nvidia.com/gpu.deploy.mig-manager": "nvidia-mig-manager",
    "nvidia.com/gpu.deploy.nvsm": None,
    "nvidia.com/gpu.deploy.sandbox-validator": "nvidia-sandbox-validator",
    "nvidia.com/gpu.deploy.sandbox-device-plugin": "nvidia-sandbox-device-plugin-daemonset",
    "nvidia.com/gpu.deploy.vgpu-device-manager": "nvidia-vgpu-device-manager",
    "nvidia.com/gpu.deploy.dra-validator": None,
    "nvidia.com/gpu.deploy.dcgm-exporter-dra": "nvidia-dcgm-exporter-dra",
    "nvidia.com/gpu.deploy.dcgm-dra": "nvidia-dcgm-dra",
    CLIENT_LABEL: None,  # waited for by nodeSelector key (client_pods), as the stock manager does
}


def paused_value(value: str) -> str:
    """The stock manager's rule: true -> paused; false stays; other values get the suffix once."""
    if value in ("true", PAUSED):
        return PAUSED
    if value == "false" or PAUSED in value:
        return value
    return f"{value}_{PAUSED}"


def restored_value(value: str) -> str:
    if value == PAUSED:
        return "true"
    return value.replace(f"_{PAUSED}", "").replace(PAUSED, "").strip("_")


def pause_patch(labels: Mapping[str, str], extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Operand labels (and ``extra`` ones: the custom eviction label) to pause; the DRA plugin comes later."""
    keys = set(OPERANDS) | set(extra)
    return {k: paused_value(v) for k, v in labels.items() if k in keys and paused_value(v) != v}


def restore_patch(labels: Mapping[str, str], extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Undo our pause, including one left behind by an interrupted earlier run."""
    keys = {*OPERANDS, DRA_DRIVER_LABEL, *extra}
    return {k: restored_value(v) for k, v in labels.items() if k in keys and PAUSED in v}


def client_pods(pods: list[dict[str, Any]], key: str = CLIENT_LABEL) -> list[str]:
    """Names of DaemonSet pods whose nodeSelector uses ``key`` (the stock WaitForPodsWithNodeSelector rule,
    k8s-driver-manager v0.12.0 internal/kubernetes/client.go)."""
    names = []
    for pod in pods:
        owners = pod.get("metadata", {}).get("ownerReferences") or []
        by_daemonset = any(o.get("controller") and o.get("kind") == "DaemonSet" for o in owners)
        if by_daemonset and key in (pod.get("spec", {}).get("nodeSelector") or {}):
            names.append(str(pod["metadata"].get("name", "?")))
    return names


def operand_selector(*more: str) -> str:
    apps = sorted({app for app in OPERANDS.values() if app} | set(more))
    return f"app in ({','.join(apps)})"
