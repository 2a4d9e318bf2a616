"""The Kubernetes client (and driver-manager through it) against a local API server started here.

The server implements the endpoints driver-manager uses (GET/PATCH node with JSON merge patch, list
pods by node and label selector, eviction), records every request, and can be told to answer with
scripted statuses or to stall, so retries, errors and timeouts are observed on the wire.
"""

from __future__ import annotations

import base64
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.apiserver import NODE, NS, TOKEN, Server, endpoint
from helpers.support import FIXTURES, fixture_paths

from driver_container.base.errors import HostDriverPresentError, KubernetesError
from driver_container.base.paths import HostPaths
from driver_container.inspect.hoststate import inspect_host
from driver_container.kube.client import KubeClient
from driver_container.kube.endpoint import KubeConfig
from driver_container.manager.facts import NodeFacts
from driver_container.manager.labels import PAUSED
from driver_container.manager.manager import ManagerOptions, run_uninstall
from driver_container.runtime.runner import Runner
from driver_container.settings import Cluster, Settings


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _client(server: Server, sleeps: Sleeps | None = None, **config: Any) -> KubeClient:
    cfg = KubeConfig(**{"timeout": 2.0, "attempts": 4, "backoff": 0.25, "backoff_max": 1.0, **config})
    return KubeClient(endpoint(server), cfg, sleep=sleeps if sleeps is not None else Sleeps())


# -- calls ----------------------------------------------------------------------------------------


def test_label_flip_is_a_merge_patch_and_removal_is_null(server: Server) -> None:
    with _client(server) as client:
        assert client.node_labels(NODE) == {"nvidia.com/gpu.deploy.driver": "true"}
        labels = client.patch_node_labels(NODE, {"nvidia.com/gpu.deploy.driver": "pre-installed", "x": "1"})
        assert labels == {"nvidia.com/gpu.deploy.driver": "pre-installed", "x": "1"}
        assert client.patch_node_labels(NODE, {"x": None}) == {"nvidia.com/gpu.deploy.driver": "pre-installed"}
    patch = server.state.requests[1]
    assert (patch.method, patch.path) == ("PATCH", f"/api/v1/nodes/{NODE}")
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    assert patch.headers["Authorization"] == f"Bearer {TOKEN}"
    assert patch.body == {"metadata": {"labels": {"nvidia.com/gpu.deploy.driver": "pre-installed", "x": "1"}}}
    assert server.state.requests[2].body == {"metadata": {"labels": {"x": None}}}


def test_list_pods_sends_node_field_selector_and_label_selector(server: Server) -> None:
    server.state.pods = [
        {"name": "dp-1", "node": NODE, "labels": {"app": "nvidia-device-plugin-daemonset"}, "operand": ""},
        {"name": "dp-2", "node": "other", "labels": {"app": "nvidia-device-plugin-daemonset"}, "operand": ""},
        {"name": "web", "node": NODE, "labels": {"app": "web"}, "operand": ""},
    ]
    with _client(server) as client:
        pods = client.list_pods(
            NS, node=NODE, label_selector="app in (gpu-feature-discovery,nvidia-device-plugin-daemonset)"
        )
        everywhere = client.list_pods(None, node=NODE)
    assert [p["metadata"]["name"] for p in pods] == ["dp-1"]
    assert sorted(p["metadata"]["name"] for p in everywhere) == ["dp-1", "web"]
    first = server.state.requests[0]
    assert first.path == f"/api/v1/namespaces/{NS}/pods"
    assert first.query["fieldSelector"] == [f"spec.nodeName={NODE}"]
    assert first.query["labelSelector"] == ["app in (gpu-feature-discovery,nvidia-device-plugin-daemonset)"]
    assert server.state.requests[1].path == "/api/v1/pods"


def test_eviction_posts_policy_v1_and_tolerates_a_gone_pod(server: Server) -> None:
    server.state.pods = [{"name": "job", "node": NODE, "labels": {}, "operand": ""}]
    with _client(server) as client:
        client.evict_pod("default", "job")
        client.evict_pod("default", "job")  # already gone: 404 is success
    post = server.state.requests[0]
    assert (post.method, post.path) == ("POST", "/api/v1/namespaces/default/pods/job/eviction")
    assert post.body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "job", "namespace": "default"},
    }
    assert server.state.pods == []


def test_retries_409_429_503_then_succeeds_with_backoff_and_retry_after(server: Server) -> None:
    server.state.script = [(409, {}), (429, {"Retry-After": "3"}), (503, {})]
    sleeps = Sleeps()
    with _client(server, sleeps, backoff_max=5.0) as client:
        assert client.node_labels(NODE) == {"nvidia.com/gpu.deploy.driver": "true"}
    assert len(server.state.requests) == 4
    assert sleeps == [0.25, 3.0, 5.0]  # backoff, Retry-After, then doubled (3 -> 6) and capped at 5


def test_retries_give_up_with_the_last_status(server: Server) -> None:
    server.state.script = [(503, {})] * 10
    with _client(server, attempts=3) as client, pytest.raises(KubernetesError) as caught:
        client.get_node(NODE)
    assert len(server.state.requests) == 3
    assert caught.value.message == f"GET /api/v1/nodes/{NODE}: 503 Service Unavailable: scripted 503"
    assert (caught.value.method, caught.value.resource, caught.value.status) == ("GET", f"/api/v1/nodes/{NODE}", 503)


@pytest.mark.parametrize(("status", "hint"), [(401, "credentials"), (403, "pods/eviction")])
def test_401_403_are_clear_errors_without_retry(server: Server, status: int, hint: str) -> None:
    server.state.script = [(status, {})]
    with _client(server) as client, pytest.raises(KubernetesError) as caught:
        client.patch_node_labels(NODE, {"a": "b"})
    assert len(server.state.requests) == 1
    assert f": {status} " in caught.value.message
    assert caught.value.fix is not None and hint in caught.value.fix


def test_a_stalled_server_times_out_every_attempt(server: Server) -> None:
    server.state.stall = 1.5
    sleeps = Sleeps()
    started = time.monotonic()
    with _client(server, sleeps, timeout=0.3, attempts=2) as client, pytest.raises(KubernetesError) as caught:
        client.get_node(NODE)
    assert time.monotonic() - started < 1.4
    assert "no complete answer within 0.3 s (2 attempt(s))" in caught.value.message
    assert len(sleeps) == 1


def test_wait_for_pods_gone_polls_until_the_pods_end(server: Server) -> None:
    pod = {"name": "gfd-x", "node": NODE, "labels": {"app": "gpu-feature-discovery"}, "operand": "gfd"}
    server.state.pods = [pod]
    server.state.daemonset_controller = True
    server.state.labels["gfd"] = "true"
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # the label flips during the second wait: the controller deletes the pod
        sleeps.append(seconds)
        if len(sleeps) == 2:
            server.state.labels["gfd"] = PAUSED

    client = KubeClient(endpoint(server), KubeConfig(timeout=2), sleep=sleep)
    with client:
        client.wait_for_pods_gone(NS, node=NODE, label_selector="app=gpu-feature-discovery", timeout=60, poll=2)
    assert sleeps == [2, 2]
    assert [(r.method, r.query["labelSelector"]) for r in server.state.requests] == [
        ("GET", ["app=gpu-feature-discovery"])
    ] * 3


def test_wait_for_pods_gone_times_out_naming_the_pods(server: Server) -> None:
    server.state.pods = [{"name": "dcgm-1", "node": NODE, "labels": {"app": "nvidia-dcgm"}, "operand": ""}]
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    client = KubeClient(endpoint(server), KubeConfig(timeout=2), sleep=sleep, clock=lambda: now[0])
    with client, pytest.raises(KubernetesError) as caught:
        client.wait_for_pods_gone(NS, node=NODE, label_selector="app=nvidia-dcgm", timeout=10, poll=3)
    assert caught.value.message == f"pods dcgm-1 (app=nvidia-dcgm) still on node {NODE} after 10 s"
    assert now[0] == 12  # polled at 0, 3, 6, 9, 12


def test_no_secret_in_logs_errors_or_reprs(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server.state.script = [(503, {}), (403, {})]
    with _client(server) as client, pytest.raises(KubernetesError) as caught:
        client.get_node(NODE)
    assert TOKEN not in caplog.text
    assert TOKEN not in str(caught.value) and TOKEN not in (caught.value.fix or "")
    assert TOKEN not in repr(client.endpoint)
    assert "503" in caplog.text  # the retry itself is logged


# -- configuration --------------------------------------------------------------------------------


def test_in_cluster_config_over_tls_with_the_service_account_ca(
    tls_server: tuple[Server, Path, Path], tmp_path: Path
) -> None:
    srv, _, _ = tls_server
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(TOKEN + "\n")
    assert srv.ca is not None
    shutil.copy(srv.ca, sa / "ca.crt")
    (sa / "namespace").write_text("gpu-operator\n")
    port = srv.url.rsplit(":", 1)[1]
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
    with KubeClient.for_cluster(Cluster.from_env(env), KubeConfig(service_account_dir=sa, timeout=5)) as client:
        assert client.node_labels(NODE) == {"a": "b"}
    assert srv.state.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"


def test_in_cluster_without_the_ca_refuses_the_self_signed_server(
    tls_server: tuple[Server, Path, Path], tmp_path: Path
) -> None:
    srv, _, _ = tls_server
    (tmp_path / "token").write_text(TOKEN)
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": srv.url.rsplit(":", 1)[1]}
    cfg = KubeConfig(service_account_dir=tmp_path, timeout=5, attempts=1)
    with (
        KubeClient.for_cluster(Cluster.from_env(env), cfg) as client,
        pytest.raises(KubernetesError, match="TLS verification failed"),
    ):
        client.get_node(NODE)


def test_kubeconfig_with_embedded_ca_and_client_certificate(
    tls_server: tuple[Server, Path, Path], tmp_path: Path
) -> None:
    srv, client_cert, client_key = tls_server
    assert srv.ca is not None

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters:\n- cluster:\n    server: " + srv.url + "\n    certificate-authority-data: " + b64(srv.ca) + "\n"
        "  name: talos\n"
        "contexts:\n- context:\n    cluster: talos\n    user: admin@talos\n  name: admin@talos\n"
        "current-context: admin@talos\n"
        "users:\n- name: admin@talos\n  user:\n"
        "    client-certificate-data: " + b64(client_cert) + "\n    client-key-data: " + b64(client_key) + "\n"
    )
    client = KubeClient.for_cluster(Cluster.from_env({"KUBECONFIG": str(kubeconfig)}), KubeConfig(timeout=5))
    workdir = client._workdir
    assert workdir is not None and sorted(p.name for p in workdir.iterdir()) == ["ca.crt", "client.crt", "client.key"]
    assert oct((workdir / "client.key").stat().st_mode & 0o777) == "0o600"
    with client:
        assert client.node_labels(NODE) == {"a": "b"}
    assert "Authorization" not in srv.state.requests[0].headers  # authenticated by certificate only
    assert not workdir.exists()  # decoded key material is removed on close


@pytest.mark.parametrize("flag", ["true", '"true"'])
def test_insecure_skip_tls_verify_is_refused_before_any_request(
    tls_server: tuple[Server, Path, Path], tmp_path: Path, flag: str
) -> None:
    """The flag used to disable verification while the bearer token was sent."""
    srv, _cert, _key = tls_server
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters:\n- cluster:\n    server: " + srv.url + "\n    insecure-skip-tls-verify: " + flag + "\n"
        "  name: lab\n"
        "contexts:\n- context:\n    cluster: lab\n    user: sa\n  name: lab\n"
        "current-context: lab\n"
        "users:\n- name: sa\n  user:\n    token: secret-token\n"
    )
    before = set(tempfile_dirs())
    with pytest.raises(KubernetesError, match="insecure-skip-tls-verify") as caught:
        KubeClient.for_cluster(Cluster.from_env({"KUBECONFIG": str(kubeconfig)}), KubeConfig(timeout=5))
    assert caught.value.fix is not None and "certificate-authority" in caught.value.fix
    assert srv.state.requests == []  # nothing, and so no token, was sent
    assert set(tempfile_dirs()) == before  # no decoded material left behind


def tempfile_dirs() -> list[str]:
    import tempfile

    return [p.name for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith("driver-manager")]


def test_no_configuration_at_all_is_a_clear_error() -> None:
    with pytest.raises(KubernetesError, match="KUBECONFIG and KUBERNETES_SERVICE_HOST are both unset"):
        KubeClient.for_cluster(Cluster())


# -- driver-manager through the client ------------------------------------------------------------


def _facts(**overrides: Any) -> NodeFacts:
    """A Talos v1.13.9 node with nvidia 595.91.07 loaded and the image's userspace 595.91.07."""
    host = inspect_host(fixture_paths(FIXTURES / "hosts" / "talos-1.13-open-595"), Settings())
    base: dict[str, Any] = {
        "host": host,
        "host_smi": None,
        "state_digest": "old",
        "driver_mounts": (),
        "pid_file_stale": False,
    }
    return NodeFacts(**{**base, **overrides})


def test_manager_pauses_waits_and_restores_operand_labels(server: Server, tmp_path: Path) -> None:
    st = server.state
    st.labels.update(
        {
            "nvidia.com/gpu.deploy.device-plugin": "true",
            "nvidia.com/gpu.deploy.dcgm": "false",
            "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
        }
    )
    st.pods = [
        {
            "name": "dp",
            "node": NODE,
            "labels": {"app": "nvidia-device-plugin-daemonset"},
            "operand": "nvidia.com/gpu.deploy.device-plugin",
        },
        {
            "name": "gfd",
            "node": NODE,
            "labels": {"app": "gpu-feature-discovery"},
            "operand": "nvidia.com/gpu.deploy.gpu-feature-discovery",
        },
    ]
    st.daemonset_controller = True
    sleeps = Sleeps()
    options = ManagerOptions(node_name=NODE, operator_namespace=NS, driver_config_digest="new", poll_interval=1)
    summary = run_uninstall(
        HostPaths(run_dir=tmp_path),
        Settings(),
        options,
        runner=Runner(),
        api_factory=lambda: _client(server, sleeps),
        facts=_facts(),
    )
    patches = [r.body["metadata"]["labels"] for r in st.requests if r.method == "PATCH"]
    assert patches == [
        {"nvidia.com/gpu.deploy.device-plugin": PAUSED, "nvidia.com/gpu.deploy.gpu-feature-discovery": PAUSED},
        {"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.gpu-feature-discovery": "true"},
    ]
    assert st.labels["nvidia.com/gpu.deploy.dcgm"] == "false"
    assert "paused 2 operand label(s)" in summary


def test_manager_labels_a_host_driver_node_pre_installed_and_fails(server: Server, tmp_path: Path) -> None:
    options = ManagerOptions(node_name=NODE, operator_namespace=NS, host_driver_delay=0)
    with pytest.raises(HostDriverPresentError) as caught:
        run_uninstall(
            HostPaths(run_dir=tmp_path),
            Settings(),
            options,
            runner=Runner(),
            api_factory=lambda: _client(server),
            facts=_facts(host_smi=Path("/usr/bin/nvidia-smi")),
        )
    assert server.state.labels["nvidia.com/gpu.deploy.driver"] == "pre-installed"
    assert "/usr/bin/nvidia-smi" in caught.value.message


def test_get_pod_and_daemonset_by_path_and_none_when_missing(server: Server) -> None:
    pod_path = f"/api/v1/namespaces/{NS}/pods/driver-abc"
    ds_path = f"/apis/apps/v1/namespaces/{NS}/daemonsets/nvidia-driver-daemonset"
    server.state.objects[pod_path] = {"kind": "Pod", "metadata": {"name": "driver-abc"}}
    server.state.objects[ds_path] = {"kind": "DaemonSet", "metadata": {"name": "nvidia-driver-daemonset"}}
    with _client(server) as client:
        assert client.get_pod(NS, "driver-abc") == server.state.objects[pod_path]
        assert client.get_daemonset(NS, "nvidia-driver-daemonset") == server.state.objects[ds_path]
        assert client.get_pod(NS, "gone") is None
        assert client.get_daemonset(NS, "gone") is None
    assert [r.path for r in server.state.requests] == [
        pod_path,
        ds_path,
        f"/api/v1/namespaces/{NS}/pods/gone",
        f"/apis/apps/v1/namespaces/{NS}/daemonsets/gone",
    ]
