"""init's node verdict (nodereport.py) against the local API server of test_manager_api.py: the Node
annotations, the Event on a refusal, RBAC refusals and an unreachable API that never fail init, and no
token in any log line."""

from __future__ import annotations

import datetime
import logging
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from helpers.apiserver import NODE, NS, TOKEN, ApiState, Server, endpoint, start_tls
from helpers.support import FIXTURES, fixture_paths
from helpers.tls import self_signed

from driver_container.inspect.hoststate import inspect_host
from driver_container.kube.client import KubeClient
from driver_container.kube.endpoint import KubeConfig
from driver_container.kube.nodereport import PREFIX, READY, REFUSED, NodeVerdict, event, report
from driver_container.lifecycle.publishing import Published, report_ready
from driver_container.settings import Cluster, Settings

ENV = {"NODE_NAME": NODE, "KUBERNETES_SERVICE_HOST": "set-so-in-cluster"}
REFUSAL = NodeVerdict(
    REFUSED, reason="verification failed, /run/nvidia/driver left untouched: MODULE_FILE_MISMATCH: nvidia: ..."
)


@pytest.fixture(scope="module")
def api_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("api-tls"), "server")


@pytest.fixture
def api(api_cert: tuple[Path, Path]) -> Iterator[Server]:
    httpd, server = start_tls(ApiState(labels={"nvidia.com/gpu.deploy.driver": "true"}), api_cert)
    yield server
    httpd.shutdown()
    httpd.server_close()


def _factory(server: Server) -> object:
    def make(env: Mapping[str, str], stop: Callable[[], bool] | None = None) -> KubeClient:
        return KubeClient(endpoint(server), KubeConfig(timeout=2.0, attempts=1), stop=stop)

    return make


def _report(server: Server, verdict: NodeVerdict) -> bool:
    return report(verdict, Cluster.from_env(ENV), client_factory=_factory(server), namespace=lambda c: NS)  # type: ignore[arg-type]


def test_ready_annotates_the_node_and_posts_no_event(api: Server) -> None:
    api.state.annotations[f"{PREFIX}reason"] = "an old refusal"
    verdict = NodeVerdict(READY, "595.91.07", "open", "driver-manager verdict /run/nvidia/x.json")
    assert _report(api, verdict) is True
    assert api.state.annotations == {
        f"{PREFIX}result": "ready",
        f"{PREFIX}version": "595.91.07",
        f"{PREFIX}flavour": "open",
        f"{PREFIX}module-files": "driver-manager verdict /run/nvidia/x.json",
    }  # the old reason is gone
    assert api.state.events == []
    (patch,) = api.state.requests
    assert (patch.method, patch.path) == ("PATCH", f"/api/v1/nodes/{NODE}")
    assert patch.headers["Content-Type"] == "application/merge-patch+json"


def test_ready_with_warnings_puts_them_on_the_node(api: Server) -> None:
    """A warning (PARAMETER_DIFFERS) used to be a log line only; now `kubectl describe node` shows it."""
    warnings = "PARAMETER_DIFFERS: nvidia: NVreg_EnableGpuFirmware is 18 in the running kernel but 0 is requested"
    assert _report(api, NodeVerdict(READY, "595.91.07", "open", "host", warnings=warnings)) is True
    assert api.state.annotations[f"{PREFIX}warnings"] == warnings
    assert _report(api, NodeVerdict(READY, "595.91.07", "open", "host")) is True
    assert f"{PREFIX}warnings" not in api.state.annotations  # gone once fixed


def test_a_ready_init_reports_parameter_differs_on_the_node(
    api: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole path from a host whose nvidia runs with another value than kernelModuleConfig asks for."""
    from driver_container.kube import client as kube

    monkeypatch.setattr(kube, "in_cluster_endpoint", lambda env, config: endpoint(api))
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    tree = tmp_path / "host"
    shutil.copytree(FIXTURES / "hosts/talos-1.13-parameter-differs", tree, symlinks=True)
    state = inspect_host(fixture_paths(tree), Settings())
    report_ready(Published(state, "595.91.07"), Cluster.from_env(ENV))
    assert api.state.annotations[f"{PREFIX}result"] == "ready"
    assert api.state.annotations[f"{PREFIX}warnings"] == (
        "PARAMETER_DIFFERS: nvidia_uvm: uvm_perf_prefetch_enable is 1 in the running kernel but 0 is requested; "
        "PARAMETER_DIFFERS: nvidia: NVreg_EnableGpuFirmware is 18 in the running kernel but 0 is requested"
    )


def test_refusal_annotates_and_posts_a_warning_event_about_the_node(api: Server) -> None:
    assert _report(api, REFUSAL) is True
    assert api.state.annotations[f"{PREFIX}result"] == "refused"
    assert "MODULE_FILE_MISMATCH" in api.state.annotations[f"{PREFIX}reason"]
    (posted,) = api.state.events
    assert posted["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE}
    assert (posted["type"], posted["reason"]) == ("Warning", "NvidiaDriverRefused")
    assert posted["metadata"]["namespace"] == NS and "MODULE_FILE_MISMATCH" in posted["message"]


def test_rbac_without_events_logs_once_and_does_not_fail(api: Server, caplog: pytest.LogCaptureFixture) -> None:
    api.state.forbidden.add(("POST", f"/api/v1/namespaces/{NS}/events"))  # the operator's ClusterRole
    with caplog.at_level(logging.DEBUG):
        assert _report(api, REFUSAL) is False
    assert api.state.annotations[f"{PREFIX}result"] == "refused"  # patch nodes is allowed
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "403" in warnings[0].getMessage() and "init carries on" in warnings[0].getMessage()
    assert TOKEN not in caplog.text


def test_an_unreachable_api_logs_once_within_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    dead = Server("https://127.0.0.1:9", ApiState(), Path("/nonexistent-ca.crt"))  # discard port: connection refused
    start = datetime.datetime.now()
    with caplog.at_level(logging.DEBUG):
        assert _report(dead, REFUSAL) is False
    assert (datetime.datetime.now() - start).total_seconds() < 10
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and TOKEN not in caplog.text


def test_outside_a_cluster_nothing_is_called_or_imported(api: Server) -> None:
    assert report(REFUSAL, Cluster.from_env({"NODE_NAME": NODE}), client_factory=_factory(api)) is False  # type: ignore[arg-type]
    assert report(REFUSAL, Cluster.from_env({"KUBERNETES_SERVICE_HOST": "x"}), client_factory=_factory(api)) is False  # type: ignore[arg-type]
    assert api.state.requests == []
    code = (
        "import sys; from driver_container.kube.nodereport import report, NodeVerdict; "
        "from driver_container.settings import Cluster; "
        "report(NodeVerdict('ready'), Cluster()); assert 'requests' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


def test_init_refusal_is_reported_by_the_cli(
    api: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole path: `nvidia-driver init` fails on a host with no nvidia module (wait timeout) and the
    Node gets the refusal (the in-cluster endpoint is pointed at the local server)."""
    from driver_container.kube import client as kube

    monkeypatch.setattr(kube, "in_cluster_endpoint", lambda env, config: endpoint(api))
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text("6.18.44-talos\n")
    (tmp_path / "proc/modules").write_text("")
    (tmp_path / "sys/module").mkdir(parents=True)
    (tmp_path / "host/etc").mkdir(parents=True)
    (tmp_path / "host/etc/os-release").write_text('ID=talos\nVERSION_ID=v1.13.9\nNAME="Talos"\n')
    env = {
        **ENV,
        "HOST_ROOT_MOUNT": str(tmp_path / "host"),
        "PROCFS_ROOT": str(tmp_path / "proc"),
        "SYSFS_ROOT": str(tmp_path / "sys"),
        "RUN_DIR": str(tmp_path / "run"),
        "HOST_OS_RELEASE": str(tmp_path / "host/etc/os-release"),
        "MODULE_WAIT_TIMEOUT": "0",
        "USERSPACE_ROOT": str(tmp_path / "image"),
        "OPERATOR_NAMESPACE": NS,
        "GDS_ENABLED": "true",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    from driver_container.cli import main

    with pytest.raises(SystemExit) as caught:
        main(["init", "--no-wait"])
    assert caught.value.code == 1
    assert api.state.annotations[f"{PREFIX}result"] == "refused"
    assert "nvidia" in api.state.annotations[f"{PREFIX}reason"]
    (posted,) = api.state.events
    assert "; fix: Talos loads them only from the machine config" in posted["message"]  # what to do, on the Node
    err = capsys.readouterr().err
    assert TOKEN not in err


def test_event_message_and_reason_are_bounded() -> None:
    long = NodeVerdict(REFUSED, reason="x " * 5000)
    body = event(long, NODE, NS, datetime.datetime(2026, 12, 3, tzinfo=datetime.UTC))
    assert len(body["message"]) <= 1024 and body["firstTimestamp"] == "2026-12-03T00:00:00Z"
