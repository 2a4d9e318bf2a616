"""driver-manager against k8s-driver-manager v0.12.0 (bd62ca7d, cmd/driver-manager/main.go): the DRA and
gpu.deploy.client labels and waits, NODE_LABEL_FOR_GPU_POD_EVICTION, and a preflight_check that checks."""

from __future__ import annotations

from typing import Any

import pytest
from manager_support import FakeApi, Node

from driver_container.base.errors import HostDriverPresentError, KubernetesError
from driver_container.cli.manager_cmd import main
from driver_container.manager.labels import CLIENT_LABEL, DRA_DRIVER_LABEL, PAUSED, client_pods
from driver_container.manager.manager import ManagerOptions, run_preflight, run_uninstall
from driver_container.settings import Settings

LABELS = {
    "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/gpu.deploy.dcgm-exporter-dra": "true",
    "nvidia.com/gpu.deploy.dra-validator": "true",
    DRA_DRIVER_LABEL: "true",
    CLIENT_LABEL: "true",
    "example.com/gpu-workload": "true",
}
OPTIONS = ManagerOptions(
    node_name="gpu-1",
    driver_config_digest="digest-new",
    host_driver_delay=0,
    poll_interval=1.0,
    pod_wait_timeout=3.0,
    custom_operand_label="example.com/gpu-workload",
)


def _client_pod(name: str, key: str = CLIENT_LABEL, kind: str = "DaemonSet") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "ownerReferences": [{"kind": kind, "controller": True, "name": "ds"}]},
        "spec": {"nodeSelector": {key: "true"}},
    }


class RecordingApi(FakeApi):
    """Records the selector of each wait; GPU-client DaemonSet pods end once their label is paused."""

    clients: list[dict[str, Any]]
    waits: list[str]

    def __init__(self, labels: dict[str, str], pods: list[str], clients: list[dict[str, Any]]) -> None:
        super().__init__(labels=labels, pods=pods)
        self.clients, self.waits = clients, []

    def list_pods(self, namespace: str | None, *, node: str, label_selector: str = "") -> list[dict[str, Any]]:
        if namespace is None:  # every namespace: the client-pod wait
            self.calls.append(("list-all", node))
            if self.labels.get(CLIENT_LABEL) == PAUSED:
                self.clients = []
            return list(self.clients)
        return super().list_pods(namespace, node=node, label_selector=label_selector)

    def wait_for_pods_gone(
        self, namespace: str | None, *, node: str, label_selector: str, timeout: float, poll: float = 5.0
    ) -> None:
        self.waits.append(label_selector)
        super().wait_for_pods_gone(namespace, node=node, label_selector=label_selector, timeout=timeout, poll=poll)


def _run(node: Node, api: FakeApi, sleeps: list[float] | None = None) -> str:
    sleep = (sleeps if sleeps is not None else []).append
    return run_uninstall(node.paths, Settings(), OPTIONS, runner=node.runner, api_factory=lambda: api, sleep=sleep)


def test_client_pods_are_daemonset_pods_selecting_on_the_key() -> None:
    pods = [_client_pod("a"), _client_pod("b", key="other"), _client_pod("c", kind="ReplicaSet"), {"metadata": {}}]
    assert client_pods(pods) == ["a"]


@pytest.mark.parametrize("node", ["talos-kmod-only-loaded"], indirect=True)
def test_dra_plugin_is_paused_last_and_every_label_comes_back(node: Node) -> None:
    api = RecordingApi(dict(LABELS), ["dp-1"], [_client_pod("user-ds-pod")])
    summary = _run(node, api)
    patches = [c[1] for c in api.calls if c[0] == "patch"]
    first = patches[0]
    assert first == {
        "nvidia.com/gpu.deploy.device-plugin": PAUSED,
        "nvidia.com/gpu.deploy.dcgm-exporter-dra": PAUSED,
        "nvidia.com/gpu.deploy.dra-validator": PAUSED,
        CLIENT_LABEL: PAUSED,
        "example.com/gpu-workload": PAUSED,
    }
    assert patches[1] == {DRA_DRIVER_LABEL: PAUSED}  # after its claim holders
    assert api.waits[0].startswith("app in (") and "nvidia-dcgm-exporter-dra" in api.waits[0]
    assert api.waits[1] == "app=nvidia-dra-driver-kubelet-plugin"
    kinds = [c[0] for c in api.calls]
    assert kinds.index("list-all") < kinds.index("patch", kinds.index("list-all"))  # clients gone before DRA pause
    assert api.labels == LABELS  # all restored, the DRA label and the custom one included
    assert "paused 6 operand label(s)" in summary


@pytest.mark.parametrize("node", ["talos-kmod-only-loaded"], indirect=True)
def test_client_pods_that_never_end_fail_after_the_timeout_and_labels_are_restored(node: Node) -> None:
    class Stuck(RecordingApi):
        def list_pods(self, namespace: str | None, *, node: str, label_selector: str = "") -> list[dict[str, Any]]:
            if namespace is None:
                return [_client_pod("stuck")]
            return super().list_pods(namespace, node=node, label_selector=label_selector)

    api = Stuck(dict(LABELS), ["dp-1"], [])
    sleeps: list[float] = []
    with pytest.raises(KubernetesError, match="GPU client pods stuck"):
        _run(node, api, sleeps)
    assert sleeps and sum(sleeps) >= OPTIONS.pod_wait_timeout
    assert api.labels == LABELS


@pytest.mark.parametrize("node", ["talos-kmod-only-loaded"], indirect=True)
def test_unchanged_digest_leaves_dra_and_clients_alone(node: Node) -> None:
    node.paths.state_file.write_text("digest-new\n")
    api = RecordingApi(dict(LABELS), ["dp-1"], [_client_pod("x")])
    _run(node, api)
    assert [c for c in api.calls if c[0] == "patch"] == [] and api.waits == []


# -- preflight_check ------------------------------------------------------------------------------


@pytest.mark.parametrize("node", ["talos-kmod-only-loaded"], indirect=True)
def test_preflight_passes_on_a_good_node_and_says_what_it_checked(node: Node) -> None:
    lines = run_preflight(node.paths, Settings())
    assert lines[0].startswith("Talos v1.13.9")
    assert any("loaded nvidia 595.91.07 = image userspace 595.91.07" in line for line in lines)
    assert any(line.startswith("module files match") for line in lines)


@pytest.mark.parametrize("node", ["talos-version-mismatch"], indirect=True)
def test_preflight_notes_a_manager_version_that_differs(node: Node) -> None:
    lines = run_preflight(node.paths, Settings())
    note = next(line for line in lines if "this manager image ships 595.91.07" in line)
    assert "driver.version=580.178.04 and driver.manager.version=580.178.04" in note


@pytest.mark.parametrize("node", ["talos-host-userspace"], indirect=True)
def test_preflight_fails_on_a_pre_installed_driver_without_labelling(node: Node) -> None:
    with pytest.raises(HostDriverPresentError, match="would label"):
        run_preflight(node.paths, Settings())


@pytest.mark.parametrize("node", ["talos-version-mismatch"], indirect=True)
def test_preflight_command_passes_and_prints_the_version_note(
    node: Node, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    p = node.paths
    for name, value in {
        "HOST_ROOT_MOUNT": p.host_root,
        "PROCFS_ROOT": p.procfs_root,
        "SYSFS_ROOT": p.sysfs_root,
        "RUN_DIR": p.run_dir,
        "USERSPACE_ROOT": p.userspace_root,
        "HOST_OS_RELEASE": p.host_os_release,
    }.items():
        monkeypatch.setenv(name, str(value))
    with pytest.raises(SystemExit) as caught:
        main(["preflight_check"])
    assert caught.value.code in (0, None)
    out = capsys.readouterr().out
    assert "driver.manager.version=580.178.04" in out and "error" not in out


# -- operator settings that are parsed but not acted on (docs/manager.md) ------------------------


def test_unused_operator_settings_each_get_a_line() -> None:
    """USE_HOST_MOFED has no effect; GDS and GDRCopy are acted on (findings/operator.py), so no line."""
    assert Settings().unused_lines() == []
    lines = Settings(use_host_mofed=True, gds_enabled=True, gdrcopy_enabled=True).unused_lines()
    assert len(lines) == 1
    assert lines[0].startswith("USE_HOST_MOFED=true has no effect")


@pytest.mark.parametrize("node", ["ubuntu-loaded"], indirect=True)
def test_the_manager_warns_about_them(
    node: Node, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOST_ROOT_MOUNT", str(node.paths.host_root))
    monkeypatch.setenv("PROCFS_ROOT", str(node.paths.procfs_root))
    monkeypatch.setenv("SYSFS_ROOT", str(node.paths.sysfs_root))
    monkeypatch.setenv("HOST_OS_RELEASE", str(node.paths.host_os_release))
    for name in ("USE_HOST_MOFED", "GDS_ENABLED", "GDRCOPY_ENABLED", "GPU_DIRECT_RDMA_ENABLED"):
        monkeypatch.setenv(name, "true")
    with pytest.raises(SystemExit):
        main(["preflight_check"])
    text = capsys.readouterr().err  # the CLI's own log handler writes to stderr
    assert "USE_HOST_MOFED=true has no effect" in text and "not waiting for MOFED" in text
