"""The node's verdict, visible without a shell on the node: Node annotations, and an Event when ``init``
refuses (a version or module-file mismatch, a root it cannot make executable, a module that never loaded).

Its states (docs/operator.md, "The node's verdict"): ``pending`` (driver-manager, before anything else;
a deleted pod whose DaemonSet still selects the node), ``ready`` or ``refused`` (``init``),
``pre-installed`` (driver-manager's relabel), and no annotation at all after a final stop or
``driver-manager uninstall``. Each verdict names this pod (``pod``: namespace/name), its driver image
(``image``, from the pod spec) and the build (``build``: this project's version, and the image digest the
runtime resolved once the driver container runs), read with one GET of the pod.

Kept off the critical path: nothing here can fail ``init``. Outside a cluster (no NODE_NAME, or neither
KUBERNETES_SERVICE_HOST nor KUBECONFIG) it does nothing and imports nothing; in a cluster the client
(``requests``) is imported only then, every call has a 1.5 s wall-clock deadline (connect and the whole
answer) and no retry, a termination signal ends the call in flight within 50 ms (``stop``), and whatever
goes wrong - API unreachable, RBAC without the verb, a malformed answer - is logged once as a warning.

RBAC: ``patch`` on ``nodes`` (the annotations) and ``create`` on ``events``. The operator's driver
ClusterRole grants get/list/patch/update/watch on nodes but nothing on events (NVIDIA/gpu-operator
a22dbf67, assets/state-driver/0210_clusterrole.yaml and manifests/state-driver/0210_clusterrole.yaml):
in an operator-managed pod the annotations work and the Event needs docs/deploy/driver-events-rbac.yaml
(every service account of the operator's namespace: one per NVIDIADriver pool).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from driver_container import project_version
from driver_container.base.errors import DriverContainerError
from driver_container.base.records import NamedRecord
from driver_container.settings import Cluster

if TYPE_CHECKING:
    import datetime

    from driver_container.formats.kernel.nvidia_proc import ModuleFlavour
    from driver_container.kube.client import KubeClient

log = logging.getLogger(__name__)

# annotation keys: <PREFIX>result, version, flavour, module-files, reason, warnings, pod, image, build
PREFIX = "nvidia-driver-container/"
KEYS = ("result", "version", "flavour", "module-files", "reason", "warnings", "pod", "image", "build")
VerdictResult = Literal["pending", "ready", "refused", "pre-installed"]
PENDING: Final = "pending"
READY: Final = "ready"
REFUSED: Final = "refused"
PRE_INSTALLED: Final = "pre-installed"
MAX_REASON = 512  # an annotation value, shown by `kubectl describe node`: one line, bounded
MAX_MESSAGE = 1024  # what the events API keeps of a message (events.k8s.io/v1 note limit)
COMPONENT = "nvidia-driver"


class NodeVerdict(NamedRecord):
    result: VerdictResult
    version: str | None = None  # loaded nvidia module version
    flavour: ModuleFlavour | None = None
    module_files: str | None = None  # where the module-file facts came from (HostState.module_files_source)
    reason: str | None = None  # for a refusal: the error line and its fix
    warnings: str | None = None  # when ready: "CODE: message" of each warning finding (PARAMETER_DIFFERS...)
    pod: str | None = None  # namespace/name of the pod the verdict is about; None: looked up by ``report``
    image: str | None = None  # its driver container's image, from the pod spec
    build: str | None = None  # this project's version, "@" and the image digest once the runtime resolved it


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def annotation_patch(verdict: NodeVerdict) -> dict[str, str | None]:
    """The merge patch: every key is set or removed, so an earlier refusal's reason does not linger."""
    return {
        f"{PREFIX}result": verdict.result,
        f"{PREFIX}version": verdict.version,
        f"{PREFIX}flavour": verdict.flavour,
        f"{PREFIX}module-files": verdict.module_files,
        f"{PREFIX}reason": _one_line(verdict.reason, MAX_REASON) if verdict.reason else None,
        f"{PREFIX}warnings": _one_line(verdict.warnings, MAX_REASON) if verdict.warnings else None,
        f"{PREFIX}pod": verdict.pod,
        f"{PREFIX}image": verdict.image,
        f"{PREFIX}build": verdict.build,
    }


def clear_patch(annotations: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The merge patch removing every ``nvidia-driver-container/`` annotation: the known keys and any
    other one the Node carries (``annotations``), so nothing of this project is left on it."""
    keys = [f"{PREFIX}{key}" for key in KEYS] + [k for k in (annotations or {}) if k.startswith(PREFIX)]
    return dict.fromkeys(keys)


def build_of(image_ref: str | None) -> str:
    """This project's version (the package's ``__version__``, the one source) and the image's digest."""
    version = project_version()  # read when a verdict is built, never at import (the package docstring)
    digest = image_ref.rsplit("@", 1)[-1] if image_ref else ""
    return f"{version}@{digest}" if digest else version


def with_pod(verdict: NodeVerdict, namespace: str, name: str, pod: Mapping[str, Any] | None) -> NodeVerdict:
    """``verdict`` naming the pod ``namespace/name``, its driver image and the build (``pod``: the API's
    object, None where it could not be read: then the image is not known)."""
    from driver_container.kube.ownpod import DRIVER_CONTAINER, image_id, images  # lazy, hot path: in a cluster

    image = images(pod).get(DRIVER_CONTAINER) if pod else None
    return verdict._replace(pod=f"{namespace}/{name}", image=image, build=build_of(image_id(pod) if pod else None))


def event(verdict: NodeVerdict, node: str, namespace: str, now: datetime.datetime) -> dict[str, Any]:
    """A core/v1 Warning Event about the Node. ``kubectl describe node`` finds node events by
    involvedObject uid = the node's name (the convention the kubelet uses for its own node events)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now.timestamp()))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{node}.nvidia-driver-", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "type": "Warning",
        "reason": "NvidiaDriverRefused",
        "message": _one_line(verdict.reason or "init refused the driver", MAX_MESSAGE),
        "source": {"component": COMPONENT, "host": node},
        "reportingComponent": COMPONENT,
        "reportingInstance": node,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


CALL_DEADLINE_S = 1.5  # per call, connect and the whole answer: SIGTERM is answered within 2 s
ClientFactory = Callable[[Cluster, Callable[[], bool] | None], "KubeClient"]


def _client(cluster: Cluster, stop: Callable[[], bool] | None = None) -> KubeClient:
    # Lazy, hot path: every init imports this module (the Node verdict); the client only in a cluster.
    from driver_container.kube.client import KubeClient
    from driver_container.kube.endpoint import KubeConfig

    # One short try per call: a slow or absent API must not hold up a node that is otherwise ready, nor a
    # SIGTERM (the waiting init kills its reporting child; --no-wait and a refusal pass ``stop``).
    return KubeClient.for_cluster(cluster, KubeConfig(timeout=CALL_DEADLINE_S, attempts=1), stop=stop)


def namespace_of(cluster: Cluster) -> str:
    from driver_container.kube.endpoint import operator_namespace  # lazy, hot path: as above

    return operator_namespace(cluster)


def report(
    verdict: NodeVerdict,
    cluster: Cluster,
    *,
    client_factory: ClientFactory = _client,
    namespace: Callable[[Cluster], str] = namespace_of,
    stop: Callable[[], bool] | None = None,
) -> bool:
    """Annotate the Node (and post an Event on a refusal). True when everything was accepted; never raises.
    ``stop`` (init's ``Shutdown.requested``) ends the call in flight and skips the rest."""
    if not cluster.in_cluster or cluster.node_name is None:
        log.debug("not in a cluster (NODE_NAME, KUBERNETES_SERVICE_HOST/KUBECONFIG): node verdict not reported")
        return False
    node = cluster.node_name
    failures: list[str] = []
    try:
        _report_calls(verdict, cluster, node, client_factory(cluster, stop), namespace, failures)
    except DriverContainerError as exc:  # no usable API configuration
        failures.append(exc.message)
    except Exception as exc:  # a bug must not fail init nor skip its check after Ready (never fatal, above)
        failures.append(f"unexpected {type(exc).__name__}")
    if failures:
        # Once, whatever failed: the node works without it (docs/operator.md lists the RBAC it needs).
        log.warning("node verdict for %s not fully reported (init carries on): %s", node, "; ".join(failures))
        return False
    log.info("node %s annotated %sresult=%s", node, PREFIX, verdict.result)
    return True


def _report_calls(
    verdict: NodeVerdict,
    cluster: Cluster,
    node: str,
    client: KubeClient,
    namespace: Callable[[Cluster], str],
    failures: list[str],
) -> None:
    with client:
        if verdict.pod is None:
            verdict = _own_pod(verdict, cluster, client, namespace, failures)
        calls: list[tuple[str, Callable[[], None]]] = [
            ("annotate node", lambda: client.patch_node_annotations(node, annotation_patch(verdict)))
        ]
        if verdict.result == REFUSED:
            import datetime  # lazy, hot path: ~2.5 ms an unchanged restart outside a cluster never uses

            ns = namespace(cluster)
            body = event(verdict, node, ns, datetime.datetime.now(datetime.UTC))
            calls.append((f"post an Event in {ns}", lambda: client.create_event(ns, body)))
        for what, call in calls:
            try:
                call()
            except DriverContainerError as exc:
                failures.append(f"{what}: {exc.message}")


def _own_pod(
    verdict: NodeVerdict,
    cluster: Cluster,
    client: KubeClient,
    namespace: Callable[[Cluster], str],
    failures: list[str],
) -> NodeVerdict:
    """``verdict`` with this pod, its image and build (one GET, the call's deadline); unchanged outside a pod."""
    name = cluster.pod_name
    if name is None:
        return verdict
    ns = namespace(cluster)
    try:
        pod = client.get_pod(ns, name)
    except DriverContainerError as exc:
        failures.append(f"get pod {ns}/{name}: {exc.message}")
        pod = None
    return with_pod(verdict, ns, name, pod)


def clear(cluster: Cluster, client_factory: ClientFactory = _client) -> bool:
    """Remove every ``nvidia-driver-container/`` annotation from this node (``driver-manager uninstall``);
    False outside a cluster. Raises KubernetesError: the person who asked for it is told why not."""
    if not cluster.in_cluster or cluster.node_name is None:
        return False
    node = cluster.node_name
    with client_factory(cluster, None) as client:
        annotations = client.get_node(node).get("metadata", {}).get("annotations")
        client.patch_node_annotations(node, clear_patch(annotations if isinstance(annotations, Mapping) else None))
    log.info("node %s: every %s annotation removed", node, PREFIX)
    return True
