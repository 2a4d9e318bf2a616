"""How the API's answers become this client's data or errors: a failed status with its fix, a malformed
answer, the fields the manager reads, ``Retry-After``."""

from __future__ import annotations

from typing import Any

from driver_container.base.errors import ApiAnswerError, KubernetesError
from driver_container.formats.numbers import parse_uint
from driver_container.kube.transport import Answer


def malformed(method: str, path: str, what: str, status: int | None = None) -> KubernetesError:
    return KubernetesError(
        f"{method} {path}: malformed answer: {what}",
        method=method,
        resource=path,
        status=status,
        fix="check that the server is the Kubernetes API server (not a proxy or another service)",
    )


def labels_of(node: dict[str, Any], method: str, path: str) -> dict[str, str]:
    metadata = node.get("metadata") or {}
    labels = metadata.get("labels") or {} if isinstance(metadata, dict) else None
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise malformed(method, path, "metadata.labels is not a mapping of strings")
    return {str(k): v for k, v in labels.items()}


def pod_shaped(pod: object) -> bool:
    """The fields the manager reads (labels.client_pods) have the types it reads them as."""
    if not isinstance(pod, dict):
        return False
    metadata, spec = pod.get("metadata", {}), pod.get("spec", {})
    if not isinstance(metadata, dict) or not isinstance(spec, dict):
        return False
    owners, selector = metadata.get("ownerReferences") or [], spec.get("nodeSelector") or {}
    return isinstance(owners, list) and all(isinstance(o, dict) for o in owners) and isinstance(selector, dict)


def retry_after(answer: Answer, delay: float, cap: float) -> float:
    value = answer.headers.get("Retry-After", "")
    # RFC 9110 section 10.2.3: delay-seconds is 1*DIGIT (an HTTP-date is not honoured: the caller's delay).
    seconds = parse_uint(value.strip())
    return min(float(seconds), cap) if seconds is not None else delay


def status_error(method: str, path: str, answer: Answer) -> KubernetesError:
    try:
        data = answer.json()
    except ApiAnswerError:
        data = None
    detail = str(data.get("message", ""))[:512] if isinstance(data, dict) else ""
    text = f"{method} {path}: {answer.status_code} {answer.reason}" + (f": {detail}" if detail else "")
    fixes = {
        401: "the API server rejected the credentials: check the service-account token (or KUBECONFIG user)",
        403: "grant the driver pod's service account get/list/patch on nodes, list on pods and create on "
        "pods/eviction (see docs/operator.md)",
        404: "check NODE_NAME (fieldRef spec.nodeName) and OPERATOR_NAMESPACE",
    }
    return KubernetesError(
        text, method=method, resource=path, status=answer.status_code, fix=fixes.get(answer.status_code)
    )
