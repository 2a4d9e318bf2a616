"""A small Kubernetes API client on ``requests``: the few calls driver-manager makes.

Credentials come from the pod's service account (in-cluster) or from KUBECONFIG, and are only ever sent
over TLS (an ``http://`` server with a token or client certificate is refused before any request). Every
request has one wall-clock deadline over connect and the whole answer, a body cap and a stop hook
(transport.py), no redirect followed, and TLS from files read by the bounded reader (tlscontext.py);
409, 429 and 5xx answers and connection failures are retried with capped exponential
backoff (honouring ``Retry-After``); every other failure, a malformed answer included (not JSON, nested
too deeply, a list where an object belongs), is a ``KubernetesError`` that names the request and a fix.
Tokens and keys never reach a log line or a repr. ``requests`` is imported only when a client is built,
so modules that merely import this one stay light.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests

from driver_container.base.errors import ApiAnswerError, KubernetesError
from driver_container.kube.answers import labels_of, malformed, pod_shaped, retry_after, status_error
from driver_container.kube.endpoint import Endpoint, KubeConfig, in_cluster_endpoint, kubeconfig_endpoint
from driver_container.kube.session import ApiSession, DeadlineAdapter
from driver_container.kube.tlscontext import tls_context
from driver_container.kube.transport import Answer, exchange
from driver_container.settings import Cluster

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({409, 429, 500, 502, 503, 504})
MERGE_PATCH = "application/merge-patch+json"


class KubeClient:
    """GET/PATCH node, GET pod and DaemonSet, list pods, evict, post an Event: the calls this project makes."""

    def __init__(
        self,
        endpoint: Endpoint,
        config: KubeConfig | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        workdir: Path | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        _require_tls_for_credentials(endpoint)
        self.endpoint = endpoint
        self.config = config or KubeConfig()
        self._sleep = sleep
        self._clock = clock
        self._workdir = workdir
        self._stop = stop  # true once a termination signal arrived: the request in flight ends within 50 ms
        # TLS from bytes read by the bounded reader (tlscontext.py): nothing opens a CA or key file by name.
        context = tls_context(endpoint) if endpoint.server.lower().startswith("https://") else None
        self._session: requests.Session = ApiSession()  # no redirect followed, nor its body read (session.py)
        self._session.max_redirects = 0
        # Retries are this client's (below), not urllib3's; the session's verify and cert stay unset.
        adapter = DeadlineAdapter(context, max_retries=0)
        self._session.mount("https://", adapter)
        self._session.mount("http://", adapter)
        if endpoint.token:
            self._session.headers["Authorization"] = f"Bearer {endpoint.token}"
        self._session.headers["Accept"] = "application/json"
        self._session.headers["User-Agent"] = "driver-manager (talos-nvidia-driver-container)"

    @classmethod
    def for_cluster(
        cls,
        cluster: Cluster,
        config: KubeConfig | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> KubeClient:
        """KUBECONFIG when set, else the in-cluster service account."""
        cfg = config or KubeConfig()
        if cluster.kubeconfig:
            workdir = Path(tempfile.mkdtemp(prefix="driver-manager-"))
            try:
                return cls(kubeconfig_endpoint(cluster.kubeconfig, workdir), cfg, workdir=workdir, stop=stop)
            except BaseException:
                shutil.rmtree(workdir, ignore_errors=True)
                raise
        if cluster.service_host:
            return cls(in_cluster_endpoint(cluster, cfg), cfg, stop=stop)
        raise KubernetesError(
            "no Kubernetes API configuration: KUBECONFIG and KUBERNETES_SERVICE_HOST are both unset",
            fix="run inside the cluster with a service account, or set KUBECONFIG",
        )

    def close(self) -> None:
        self._session.close()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the API calls ---------------------------------------------------------------------------

    def get_node(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/api/v1/nodes/{quote(name, safe='')}")

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod, or None when it does not exist (404)."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        return self._json("GET", path, missing_ok=True) or None

    def get_daemonset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The DaemonSet (apps/v1), or None when it does not exist (404)."""
        path = f"/apis/apps/v1/namespaces/{quote(namespace, safe='')}/daemonsets/{quote(name, safe='')}"
        return self._json("GET", path, missing_ok=True) or None

    def node_labels(self, name: str) -> dict[str, str]:
        path = f"/api/v1/nodes/{quote(name, safe='')}"
        return labels_of(self._json("GET", path), "GET", path)

    def patch_node_labels(self, name: str, labels: Mapping[str, str | None]) -> dict[str, str]:
        """JSON merge patch (RFC 7386) of node labels; ``None`` removes a label. Returns the new labels."""
        body = {"metadata": {"labels": dict(labels)}}
        path = f"/api/v1/nodes/{quote(name, safe='')}"
        return labels_of(self._json("PATCH", path, body=body, content_type=MERGE_PATCH), "PATCH", path)

    def patch_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> None:
        """JSON merge patch of node annotations (nodereport.py); ``None`` removes one."""
        body = {"metadata": {"annotations": dict(annotations)}}
        self._json("PATCH", f"/api/v1/nodes/{quote(name, safe='')}", body=body, content_type=MERGE_PATCH)

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        """POST a core/v1 Event (nodereport.py)."""
        self._json("POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/events", body=dict(event))

    def list_pods(self, namespace: str | None, *, node: str, label_selector: str = "") -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods" if namespace else "/api/v1/pods"
        params = {"fieldSelector": f"spec.nodeName={node}"}
        if label_selector:
            params["labelSelector"] = label_selector
        items = self._json("GET", path, params=params).get("items") or []
        if not isinstance(items, list) or not all(pod_shaped(item) for item in items):
            raise malformed("GET", path, "items is not a list of pods")
        return items

    def evict_pod(self, namespace: str, name: str) -> None:
        """Eviction (policy/v1); 429 means a disruption budget refuses it for now and is retried."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/eviction"
        self._json("POST", path, body=body, missing_ok=True)

    def wait_for_pods_gone(
        self, namespace: str | None, *, node: str, label_selector: str, timeout: float, poll: float = 5.0
    ) -> None:
        """Poll until no pod matches on ``node``; KubernetesError naming the pods after ``timeout`` s."""
        deadline = self._clock() + timeout
        while True:
            pods = self.list_pods(namespace, node=node, label_selector=label_selector)
            names = [str(p.get("metadata", {}).get("name", "?")) for p in pods]
            if not names:
                return
            if self._clock() >= deadline:
                raise KubernetesError(
                    f"pods {', '.join(sorted(names))} ({label_selector}) still on node {node} after {timeout:g} s",
                    resource="pods",
                    fix="check why they do not terminate (kubectl describe pod), then restart the driver pod",
                )
            log.info("waiting for %d pod(s) %s on %s to end", len(names), label_selector, node)
            self._sleep(poll)

    # -- transport -------------------------------------------------------------------------------

    def _json(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str = "application/json",
        missing_ok: bool = False,
    ) -> dict[str, Any]:
        """The answer's JSON object; a KubernetesError for a failed status or any other kind of answer."""
        answer = self._request(method, path, params=params, body=body, content_type=content_type)
        if answer.status_code == 404 and missing_ok:
            return {}
        if answer.status_code >= 300:
            raise status_error(method, path, answer)
        try:
            data = answer.json()
        except ApiAnswerError as exc:
            raise malformed(method, path, exc.message, answer.status_code) from exc
        if not isinstance(data, dict):
            raise malformed(method, path, f"the answer is a JSON {type(data).__name__}, not an object")
        return data

    def _request(
        self, method: str, path: str, *, params: Mapping[str, str] | None, body: object, content_type: str
    ) -> Answer:
        cfg = self.config
        delay = cfg.backoff
        for attempt in range(1, cfg.attempts + 1):
            last = attempt == cfg.attempts
            try:
                answer = exchange(
                    self._session,
                    method,
                    self.endpoint.server + path,
                    seconds=cfg.timeout,
                    stop=self._stop,
                    params=params,
                    json=body,
                    headers={"Content-Type": content_type} if body is not None else None,
                )
            except ApiAnswerError as exc:
                # A certificate that does not verify will not verify on a retry either; nor will a stop.
                if last or not exc.retry:
                    raise KubernetesError(
                        f"{method} {path} on {self.endpoint.server}: {exc.message} ({attempt} attempt(s))",
                        method=method,
                        resource=path,
                        fix=exc.fix or "check that the API server is reachable from the pod (network policy, DNS, CA)",
                    ) from exc
                log.warning("%s %s: %s; retry %d/%d in %.1f s", method, path, exc.message, attempt, cfg.attempts, delay)
            else:
                log.debug("%s %s -> %d", method, path, answer.status_code)
                if answer.status_code not in RETRY_STATUSES or last:
                    return answer
                delay = retry_after(answer, delay, cfg.backoff_max)
                log.warning(
                    "%s %s: %d; retry %d/%d in %.1f s", method, path, answer.status_code, attempt, cfg.attempts, delay
                )
            self._sleep(delay)
            delay = min(delay * 2, cfg.backoff_max)
        raise AssertionError("unreachable")


def _require_tls_for_credentials(endpoint: Endpoint) -> None:
    """A token or client certificate goes over TLS only: over ``http://`` anyone on the path reads it."""
    if (endpoint.token or endpoint.client_cert) and not endpoint.server.lower().startswith("https://"):
        raise KubernetesError(
            f"{endpoint.server}: credentials (a token or client certificate) are sent only over https://, "
            "never in the clear",
            fix="use the API server's https:// URL (with its CA in certificate-authority-data)",
        )
