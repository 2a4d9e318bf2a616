"""Whether a SIGTERM ends this pod for good, asked of the API, and what the node's verdict becomes.

A waiting ``init`` gets SIGTERM for three reasons, told apart by the pod and its DaemonSet:
- the container restarts (a kubelet restart of the container, a liveness failure): the pod is not being
  deleted (no ``metadata.deletionTimestamp``): the root and the verdict stay as they are;
- the pod is deleted and its DaemonSet still selects this node (its template's ``nodeSelector`` against
  the Node's labels): a replacement comes (an ``OnDelete`` rollout, an eviction, a ``kubectl delete pod``):
  the root stays for it and the verdict says ``pending``, naming this pod, until the new pod answers
  (an image-pull failure of the replacement leaves exactly that);
- the pod is deleted and no DaemonSet selects the node any more (the DaemonSet is gone or being deleted,
  the operator relabelled the node, the project is uninstalled): a final stop: the verdict is cleared and
  ``init`` unmounts the root (lifecycle/finalstop.py).

The DaemonSet controller places a pod by the template's nodeSelector and node affinity
(kubernetes/kubernetes pkg/controller/daemon/daemon_controller.go ``NodeShouldRunDaemonPod``, v1.32.0);
the operator's driver DaemonSet selects by ``nodeSelector`` (``nvidia.com/gpu.deploy.driver: "true"``, and
the pool's labels for NVIDIADriver; NVIDIA/gpu-operator assets/state-driver/0500_daemonset.yaml at
v26.7.0, 10ee5b3638b8), so the nodeSelector is what is compared. Every answer the API does not give
(RBAC, a timeout, a malformed object) means "not known": nothing is cleared and nothing unmounted. The
operator's driver ClusterRole grants ``get`` on pods and daemonsets and ``get``/``patch`` on nodes
(assets/state-driver/0210_clusterrole.yaml at v26.7.0).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from driver_container.base.errors import DriverContainerError
from driver_container.kube.client import KubeClient
from driver_container.kube.nodereport import PENDING, NodeVerdict, annotation_patch, clear_patch, with_pod
from driver_container.kube.ownpod import owner_daemonset, pod_spec

log = logging.getLogger(__name__)

StopKind = Literal["final", "replaced", "restart", "unknown"]


@dataclass(frozen=True, slots=True)
class StopDecision:
    kind: StopKind
    reason: str


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def deleting(obj: Mapping[str, Any]) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def selects(daemonset: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """The DaemonSet's template nodeSelector matches ``labels`` (an empty one selects every node)."""
    selector = pod_spec(daemonset).get("nodeSelector")
    wanted = selector if isinstance(selector, Mapping) else {}
    return all(labels.get(str(key)) == value for key, value in wanted.items())


def decide(
    pod: Mapping[str, Any] | None, daemonset: Mapping[str, Any] | None, labels: Mapping[str, str] | None
) -> StopDecision:
    """Pure. ``pod`` None: gone already (deleted); ``daemonset`` None: gone or none owns the pod;
    ``labels`` None: not read (only needed when the DaemonSet stands)."""
    if pod is not None and not deleting(pod):
        return StopDecision("restart", "the pod is not being deleted (a container restart)")
    if daemonset is None:
        return StopDecision("final", "the pod is deleted and no DaemonSet owns it any more")
    name = _meta(daemonset).get("name", "?")
    if deleting(daemonset):
        return StopDecision("final", f"the pod is deleted and its DaemonSet {name} is being deleted")
    if labels is None:
        return StopDecision("unknown", "the Node's labels could not be read")
    if not selects(daemonset, labels):
        return StopDecision("final", f"the pod is deleted and its DaemonSet {name} no longer selects this node")
    return StopDecision("replaced", f"the pod is deleted; its DaemonSet {name} still selects this node")


def _ask(client: KubeClient, namespace: str, name: str, node: str) -> tuple[StopDecision, Mapping[str, Any] | None]:
    """The decision and this pod as the API answered it."""
    pod = client.get_pod(namespace, name)
    if pod is None:
        # Gone already: whether a replacement comes is not known without its owner; keep the root.
        return StopDecision("unknown", f"the pod {namespace}/{name} is gone already; its owner is not known"), None
    if not deleting(pod):
        return decide(pod, None, None), pod
    owner = owner_daemonset(pod)
    daemonset = client.get_daemonset(namespace, owner) if owner else None
    labels = client.node_labels(node) if daemonset is not None and not deleting(daemonset) else None
    return decide(pod, daemonset, labels), pod


def _write(client: KubeClient, decision: StopDecision, node: str, namespace: str, name: str, pod: Any) -> None:
    if decision.kind == "final":
        annotations = client.get_node(node).get("metadata", {}).get("annotations")
        client.patch_node_annotations(node, clear_patch(annotations if isinstance(annotations, Mapping) else None))
    elif decision.kind == "replaced":
        pending = NodeVerdict(PENDING, reason=f"{decision.reason}: a replacement comes")
        client.patch_node_annotations(node, annotation_patch(with_pod(pending, namespace, name, pod)))


def settle_verdict(
    name: str | None,
    node: str,
    namespace: str,
    client_factory: Callable[[], KubeClient],
) -> StopDecision:
    """Ask the API why pod ``name`` (this one) stops and write the verdict that follows (cleared on a final
    stop, ``pending`` naming this pod when a replacement comes). Never raises: what is not known is ``unknown``."""
    if name is None:
        return StopDecision("unknown", "this pod's name is not known (POD_NAME, HOSTNAME)")
    decision = StopDecision("unknown", "the API was not asked")
    try:
        with client_factory() as client:
            decision, pod = _ask(client, namespace, name, node)
            log.info("stopping: %s (%s)", decision.kind, decision.reason)
            _write(client, decision, node, namespace, name, pod)
    except DriverContainerError as exc:
        log.warning("the node's verdict on this stop is not written (%s): %s", decision.kind, exc.message)
    except Exception as exc:  # never fatal: a stop goes on as a container restart would
        log.warning("the node's verdict on this stop is not written: unexpected %s", type(exc).__name__)
        return StopDecision("unknown", f"unexpected {type(exc).__name__}")
    return decision
