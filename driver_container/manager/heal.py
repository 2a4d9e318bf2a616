"""A stale driver pod replaces itself: the API calls around ``staleness.decide`` and the pod context for init.

The operator's stock driver ClusterRole grants ``get`` on pods and daemonsets and ``create`` on
``pods/eviction`` (NVIDIA/gpu-operator assets/state-driver/0210_clusterrole.yaml at v26.7.0, 10ee5b3638b8),
so no new permission is needed. This step never makes the manager fail by itself: without a pod name, an
API client that reads pods, or an answer, it warns and carries on. It fails on purpose in two cases: after
evicting this pod (the DaemonSet controller then creates it from the current template), and when a stale
pod cannot go by itself (eviction refused, or tried once already): then the fix is exactly ``kubectl delete
pod -n <ns> <pod>``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from driver_container.base.errors import DriverContainerError, KubernetesError
from driver_container.base.paths import HostPaths
from driver_container.formats.imagetag import tag_of_image
from driver_container.inspect.podcontext import PodContext
from driver_container.inspect.verdict import current_binding
from driver_container.kube.ownpod import DRIVER_CONTAINER, MANAGER_CONTAINER, images, owner_daemonset
from driver_container.manager import handoff
from driver_container.manager.facts import NodeFacts
from driver_container.manager.staleness import Decision, PodFacts, decide

log = logging.getLogger(__name__)

# The node annotation the operator sets on nodes its upgrade controller manages (NVIDIA/gpu-operator
# controllers/state_manager.go driverAutoUpgradeAnnotationKey, set by nodelabeling_controller.go
# setDriverAutoUpgradeAnnotation) and the label of the node's upgrade state (vendored
# k8s-operator-libs pkg/upgrade/consts.go), both at v26.7.0.
UPGRADE_ENABLED_ANNOTATION: Final = "nvidia.com/gpu-driver-upgrade-enabled"
UPGRADE_STATE_LABEL: Final = "nvidia.com/gpu-driver-upgrade-state"
POLL: Final = 2.0
# What became of the eviction, by decision (inspect/podcontext.py EVICTION_OUTCOMES).
OUTCOMES: Final = {"current": "not-needed", "keep": "kept", "evict": "evicted", "ask-delete": "refused"}


class PodOptions(Protocol):
    """What this step reads of ``manager.ManagerOptions``."""

    @property
    def operator_namespace(self) -> str: ...

    @property
    def node_name(self) -> str: ...


@runtime_checkable
class PodApi(Protocol):
    """The calls of ``kube.KubeClient`` this step makes."""

    def get_node(self, name: str) -> dict[str, Any]: ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def get_daemonset(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def evict_pod(self, namespace: str, name: str) -> None: ...


def _meta(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    value = meta.get(key) if isinstance(meta, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _uid(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata")
    uid = meta.get("uid") if isinstance(meta, Mapping) else None
    return uid if isinstance(uid, str) else ""


def _pod_driver(pod_images: Mapping[str, str], facts: NodeFacts) -> str | None:
    """The driver this pod's image runs: its tag's, else this (manager) image's userspace when both
    containers run one image (pinned to one digest)."""
    image = pod_images.get(DRIVER_CONTAINER)
    tag = tag_of_image(image) if image else None
    if tag is not None and tag.driver:
        return tag.driver
    same = image is not None and pod_images.get(MANAGER_CONTAINER) == image
    return facts.host.userspace.version if same else None


def pod_facts(
    pod: Mapping[str, Any], daemonset: Mapping[str, Any] | None, node: Mapping[str, Any], facts: NodeFacts, tried: bool
) -> PodFacts:
    """What ``decide`` needs from the three objects and the host."""
    own = images(pod)
    template = images(daemonset) if daemonset is not None else None
    pod_tag = tag_of_image(own.get(DRIVER_CONTAINER, ""))
    template_tag = tag_of_image((template or {}).get(DRIVER_CONTAINER, ""))
    return PodFacts(
        pod_images=own,
        template_images=template,
        upgrade_managed=_meta(node, "annotations").get(UPGRADE_ENABLED_ANNOTATION) == "true",
        loaded=facts.nvidia_version if facts.nvidia_loaded else None,
        pod_driver=_pod_driver(own, facts),
        template_driver=template_tag.driver if template_tag else None,
        pod_release=pod_tag.talos_release if pod_tag else None,
        template_release=template_tag.talos_release if template_tag else None,
        node_release=facts.talos_version,
        already_tried=tried,
    )


def _context(
    namespace: str, pod: str, ds: str | None, node: Mapping[str, Any], seen: PodFacts, eviction: str
) -> PodContext:
    state = _meta(node, "labels").get(UPGRADE_STATE_LABEL)
    tag = tag_of_image(seen.pod_images.get(DRIVER_CONTAINER, ""))
    return PodContext(
        namespace=namespace,
        pod=pod,
        boot_id=None,
        driver_image=seen.pod_images.get(DRIVER_CONTAINER),
        template_image=(seen.template_images or {}).get(DRIVER_CONTAINER),
        current=None if seen.template_images is None else dict(seen.pod_images) == dict(seen.template_images),
        image_release=seen.pod_release,
        node_release=seen.node_release,
        upgrade_managed=seen.upgrade_managed,
        upgrade_state=state if isinstance(state, str) else None,
        eviction=eviction,
        daemonset=ds,
        image_channel=tag.channel if tag else None,
        image_driver=tag.driver if tag else None,
    )


def _delete_fix(namespace: str, pod: str) -> str:
    return f"kubectl delete pod -n {namespace} {pod}"


def _wait_gone(api: PodApi, namespace: str, pod: str, uid: str, wait: float, sleep: Callable[[float], None]) -> None:
    """Until the API no longer has this pod (uid), at most ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            found = api.get_pod(namespace, pod)
        except KubernetesError:
            found = {}
        if found is None or (found and _uid(found) != uid):
            return
        sleep(min(POLL, max(0.0, deadline - time.monotonic())))


def _evict(api: PodApi, run_dir: Path, namespace: str, pod: str, uid: str, decision: Decision) -> None:
    """Mark, then evict; KubernetesError with the delete command when either fails."""
    try:
        handoff.mark_eviction(run_dir, uid)  # before the call: a pod killed meanwhile is not evicted twice
        api.evict_pod(namespace, pod)
    except (DriverContainerError, OSError) as exc:
        detail = exc.message if isinstance(exc, DriverContainerError) else str(exc)
        raise KubernetesError(
            f"pod {namespace}/{pod} is {decision.reason}; evicting it was refused: {detail}",
            method="POST",
            resource=f"pods/{pod}/eviction",
            status=exc.status if isinstance(exc, KubernetesError) else None,
            fix=_delete_fix(namespace, pod),
        ) from exc


def _leave(run_dir: Path, context: PodContext) -> None:
    try:
        handoff.write_pod_context(run_dir, context)
    except (DriverContainerError, OSError) as exc:
        log.warning("cannot leave the pod context for init: %s", exc)


def _read(api: PodApi, namespace: str, pod_name: str, node_name: str) -> tuple[dict[str, Any], str | None, Any, Any]:
    """This pod, its DaemonSet's name and object, and the node; KubernetesError without the pod."""
    pod = api.get_pod(namespace, pod_name)
    if pod is None:
        raise KubernetesError(f"pod {namespace}/{pod_name} not found", resource="pods")
    ds_name = owner_daemonset(pod)
    daemonset = api.get_daemonset(namespace, ds_name) if ds_name else None
    return pod, ds_name, daemonset, api.get_node(node_name)


def heal_stale_pod(
    api: object,
    options: PodOptions,
    pod_name: str | None,
    facts: NodeFacts,
    paths: HostPaths,
    *,
    wait: float = 60.0,
    sleep: Callable[[float], None] = time.sleep,
) -> PodContext | None:
    """Decide, evict at most once, leave the pod context for init; returns it (None: nothing known)."""
    run_dir, namespace = paths.run_dir, options.operator_namespace
    if pod_name is None or not isinstance(api, PodApi):
        handoff.remove_pod_context(run_dir)
        return None
    try:
        pod, ds_name, daemonset, node = _read(api, namespace, pod_name, options.node_name)
    except KubernetesError as exc:
        log.warning("this pod is not checked against its DaemonSet (carrying on): %s", exc.message)
        handoff.remove_pod_context(run_dir)
        return None
    uid = _uid(pod)
    seen = pod_facts(pod, daemonset, node, facts, tried=bool(uid) and handoff.evicted_uid(run_dir) == uid)
    decision = decide(seen)
    log.info("pod %s/%s: %s", namespace, pod_name, decision.reason)
    context = _context(namespace, pod_name, ds_name, node, seen, OUTCOMES[decision.action])._replace(
        boot_id=current_binding(paths.proc, None, None, None).boot_id
    )
    _leave(run_dir, context)
    if decision.action == "ask-delete":
        raise KubernetesError(
            f"pod {namespace}/{pod_name} is {decision.reason}; it did not go",
            resource=f"pods/{pod_name}",
            fix=_delete_fix(namespace, pod_name),
        )
    if decision.action == "evict":
        _evict_and_wait(api, run_dir, context, uid, decision, wait, sleep)
    return context


def _evict_and_wait(
    api: PodApi,
    run_dir: Path,
    context: PodContext,
    uid: str,
    decision: Decision,
    wait: float,
    sleep: Callable[[float], None],
) -> None:
    """Evict this pod, wait for it to end (bounded), and stop the manager: the pod is on its way out."""
    namespace, pod = context.namespace, context.pod
    try:
        _evict(api, run_dir, namespace, pod, uid, decision)
    except KubernetesError:
        _leave(run_dir, context._replace(eviction="refused"))
        raise
    log.warning("pod %s/%s evicted (%s); waiting up to %g s for it to end", namespace, pod, decision.reason, wait)
    _wait_gone(api, namespace, pod, uid, wait, sleep)
    raise KubernetesError(
        f"pod {namespace}/{pod} evicted: it was {decision.reason}",
        method="POST",
        resource=f"pods/{pod}/eviction",
        fix=f"none: the DaemonSet controller creates the pod again from the current template of {context.daemonset}",
    )
