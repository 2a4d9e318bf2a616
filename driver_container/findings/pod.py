"""What driver-manager learned of this pod (inspect/podcontext.py) turned into findings and fixes.

Who is to act differs by cause, and a fix never asks to set what is already set:

* a stale pod (its DaemonSet's template changed, the pod did not): delete the pod;
* an image tagged for another Talos release than the node runs: a ClusterPolicy gives every node the OS
  tag of one GPU node (NVIDIA/gpu-operator controllers/state_manager.go ``getGPUNodeOSInfo``, ``Limit(1)``,
  v26.7.0 10ee5b3638b8); one NVIDIADriver per pool gives each Talos release its own image;
* a current pod whose tag fits the node's release while the node loads another driver: the Talos side
  (the node's kmod extension) is what differs;
* a node the upgrade controller left in ``upgrade-failed``: how it leaves that state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from driver_container.findings.model import Finding

if TYPE_CHECKING:
    from driver_container.inspect.hoststate import HostState
    from driver_container.inspect.podcontext import PodContext

UPGRADE_FAILED: Final = "upgrade-failed"  # k8s-operator-libs pkg/upgrade/consts.go UpgradeStateFailed
NVIDIADRIVER_FIX: Final = (
    "deploy one NVIDIADriver per node pool instead of the ClusterPolicy's driver (docs/deploy/nvidiadriver.yaml): "
    "the operator then renders one DaemonSet per OS release, each with its own -talos<R> tag"
)


def node_release(state: HostState, context: PodContext) -> str | None:
    return state.platform.talos_version or context.node_release


def foreign_release(state: HostState, context: PodContext) -> str | None:
    """The node's release when this pod's image is tagged for another one; else None."""
    node = node_release(state, context)
    return node if context.image_release and node and context.image_release != node else None


def upgrade_failed_fix(context: PodContext) -> str:
    """How a node leaves upgrade-failed: the upgrade controller moves it on by itself once the driver pod is in
    sync with its DaemonSet and every container is Ready (vendored NVIDIA/k8s-operator-libs
    pkg/upgrade/common_manager.go ``ProcessUpgradeFailedNodes``, ``isDriverPodInSync``, at gpu-operator
    v26.7.0): no label to edit."""
    return (
        "the node stays cordoned in upgrade-failed (nvidia.com/gpu-driver-upgrade-state) until a driver pod "
        "of the DaemonSet's current revision runs with every container Ready: then the operator's upgrade "
        "controller moves it to uncordon-required (upgrade-done if the node was cordoned before the upgrade) "
        "by itself; so fix the cause this pod reports, and if the pod is not of the current template, "
        f"`{context.delete_command}`"
    )


def _talos_side(state: HostState, context: PodContext, loaded: str, userspace: str) -> str:
    node = node_release(state, context) or "?"
    other = ""
    if context.image_channel in ("production", "lts"):
        tier = "lts" if context.image_channel == "production" else "production"
        other = f"; or, if the node's kmod extension is the {tier} tier, version: {tier}"
    elif context.image_driver is not None:
        other = f"; or set the driver version to {loaded} (NVIDIADriver: spec.version)"
    return (
        f"the node's Talos {node} loads {loaded} (its NVIDIA kmod extension); this image ({context.driver_image}) "
        f"is for {userspace}: upgrade the node with talosctl to the Talos release that ships {userspace} "
        f"(docs/talos.md lists them); if the driver setting was changed ahead of Talos, nothing else: the pod "
        f"matches once Talos is upgraded{other}"
    )


def mismatch_fix(state: HostState, context: PodContext, loaded: str, userspace: str) -> str:
    """VERSION_MISMATCH's fix where the pod context says why the versions differ."""
    if context.current is False:
        fix = (
            f"this pod runs an older template of DaemonSet {context.daemonset or '?'} ({context.driver_image}; "
            f"the template now has {context.template_image}): "
        )
        fix += (
            "the operator's upgrade controller replaces it (nvidia.com/gpu-driver-upgrade-enabled=true)"
            if context.upgrade_managed
            else f"`{context.delete_command}`"
        )
    elif node := foreign_release(state, context):
        fix = f"this image is tagged for Talos {context.image_release}, the node runs Talos {node}: {NVIDIADRIVER_FIX}"
    else:
        fix = _talos_side(state, context, loaded, userspace)
    if context.upgrade_state == UPGRADE_FAILED:
        fix += "; " + upgrade_failed_fix(context)
    return fix


def pod_findings(state: HostState, mismatch: bool) -> list[Finding]:
    """The pod's own findings: another Talos release's tag (a warning while the driver matches; with a
    version mismatch VERSION_MISMATCH carries it) and upgrade-failed."""
    context = state.pod_context
    if context is None:
        return []
    out: list[Finding] = []
    node = foreign_release(state, context)
    if node is not None:
        out.append(
            Finding(
                "warning",
                "IMAGE_RELEASE_MISMATCH",
                f"this pod's image {context.driver_image} is tagged for Talos {context.image_release} but the node "
                f"runs Talos {node} (a ClusterPolicy gives every node the OS tag of one GPU node)"
                + ("" if mismatch else "; the driver still matches"),
                NVIDIADRIVER_FIX,
            )
        )
    if context.upgrade_state == UPGRADE_FAILED:
        out.append(
            Finding(
                "warning",
                "UPGRADE_FAILED",
                "the operator's upgrade controller marked this node upgrade-failed and keeps it cordoned",
                upgrade_failed_fix(context),
            )
        )
    return out
