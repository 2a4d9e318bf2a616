"""The node's verdict is never stale (docs/operator.md, "The node's verdict"), against the loopback TLS API
stand-in: ``pending`` from driver-manager before anything else, never ``ready`` while the pod is refused,
``ready`` carrying pod, image and build, ``pre-installed`` after the relabel; on SIGTERM a final stop
(pod deleted, no DaemonSet selects the node) unmounts a real tmpfs root and clears the verdict, a
replacement to come marks ``pending`` and keeps the root, a container restart keeps both; and
``driver-manager uninstall`` unmounts and clears, twice in a row."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.apiserver import NODE, NS, TOKEN, Server, endpoint
from helpers.hostenv import make_host
from helpers.mounts import tmpfs
from helpers.support import FIXTURES, fixture_paths, require
from helpers.waits import wait_until

from driver_container import __version__
from driver_container.base.errors import HostDriverPresentError
from driver_container.base.paths import HostPaths
from driver_container.driverroot.mount import MOUNT_SOURCE
from driver_container.formats.kernel.mountinfo import parse_mountinfo
from driver_container.inspect.hoststate import inspect_host
from driver_container.kube.client import KubeClient
from driver_container.kube.endpoint import KubeConfig
from driver_container.kube.nodereport import PREFIX
from driver_container.lifecycle.publishing import Published, report_ready
from driver_container.manager.facts import NodeFacts
from driver_container.manager.manager import ManagerOptions, run_uninstall
from driver_container.runtime.runner import Runner
from driver_container.settings import Cluster, Settings

POD = "nvidia-driver-daemonset-x7k2p"
DS = "nvidia-driver-daemonset"
IMAGE = "ghcr.io/example/nvidia-driver:595.91.07-talos1.13.9"
DIGEST = "sha256:" + "ab" * 32
POD_PATH = f"/api/v1/namespaces/{NS}/pods/{POD}"
DS_PATH = f"/apis/apps/v1/namespaces/{NS}/daemonsets/{DS}"
IN_CLUSTER = {"NODE_NAME": NODE, "KUBERNETES_SERVICE_HOST": "set", "POD_NAME": POD, "OPERATOR_NAMESPACE": NS}


def _pod(*, deleting: bool = False, started: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": POD,
        "namespace": NS,
        "ownerReferences": [{"kind": "DaemonSet", "name": DS, "controller": True}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T04:00:00Z"
    statuses = [{"name": "nvidia-driver-ctr", "imageID": f"ghcr.io/example/nvidia-driver@{DIGEST}"}]
    return {
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "initContainers": [{"name": "k8s-driver-manager", "image": IMAGE}],
            "containers": [{"name": "nvidia-driver-ctr", "image": IMAGE}],
        },
        "status": {"containerStatuses": statuses if started else []},
    }


def _daemonset(selector: dict[str, str], *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": DS, "namespace": NS}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T04:00:00Z"
    return {"kind": "DaemonSet", "metadata": meta, "spec": {"template": {"spec": {"nodeSelector": selector}}}}


@pytest.fixture
def cluster(server: Server, monkeypatch: pytest.MonkeyPatch) -> Server:
    """This process in the cluster: the in-cluster endpoint is the stand-in, the pod is POD in NS."""
    from driver_container.kube import client as kube

    monkeypatch.setattr(kube, "in_cluster_endpoint", lambda env, config: endpoint(server))
    for key, value in IN_CLUSTER.items():
        monkeypatch.setenv(key, value)
    return server


def _facts(**overrides: Any) -> NodeFacts:
    host = inspect_host(fixture_paths(FIXTURES / "hosts" / "talos-1.13-open-595"), Settings())
    base: dict[str, Any] = {"host": host, "host_smi": None, "state_digest": "d", "driver_mounts": ()}
    return NodeFacts(**{**base, "pid_file_stale": False, **overrides})


def _client(server: Server) -> KubeClient:
    return KubeClient(endpoint(server), KubeConfig(timeout=2.0, attempts=1))


def _mounts_below(path: Path) -> list[str]:
    text = Path("/proc/self/mountinfo").read_text()
    return [m.mount_point for m in parse_mountinfo(text) if m.mount_point.startswith(str(path))]


# -- pending, ready, refused, pre-installed -------------------------------------------------------------


def test_the_manager_marks_pending_first_and_a_refused_init_never_says_ready(
    cluster: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = cluster.state
    st.objects[POD_PATH] = _pod(started=False)  # the driver container has not started: no digest yet
    st.annotations.update({f"{PREFIX}result": "ready", f"{PREFIX}version": "580.95.05"})  # the previous pod's
    options = ManagerOptions(node_name=NODE, operator_namespace=NS, driver_config_digest="d")
    run_uninstall(
        HostPaths(run_dir=tmp_path / "run"),
        Settings(cluster=Cluster.from_env(IN_CLUSTER)),
        options,
        runner=Runner(),
        api_factory=lambda: _client(cluster),
        facts=_facts(),
    )
    first_patch = next(r for r in st.requests if r.method == "PATCH")
    assert first_patch.body["metadata"]["annotations"][f"{PREFIX}result"] == "pending"
    assert st.annotations[f"{PREFIX}result"] == "pending"
    assert st.annotations[f"{PREFIX}pod"] == f"{NS}/{POD}"
    assert st.annotations[f"{PREFIX}image"] == IMAGE
    assert st.annotations[f"{PREFIX}build"] == __version__
    assert f"{PREFIX}version" not in st.annotations  # the previous pod's driver is not claimed

    # init then refuses (no nvidia module within the wait): refused, never ready in between.
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text("6.18.44-talos\n")
    (tmp_path / "proc/modules").write_text("")
    (tmp_path / "sys/module").mkdir(parents=True)
    (tmp_path / "host/etc").mkdir(parents=True)
    (tmp_path / "host/etc/os-release").write_text('ID=talos\nVERSION_ID=v1.13.9\nNAME="Talos"\n')
    for key, value in {
        "HOST_ROOT_MOUNT": str(tmp_path / "host"),
        "PROCFS_ROOT": str(tmp_path / "proc"),
        "SYSFS_ROOT": str(tmp_path / "sys"),
        "RUN_DIR": str(tmp_path / "run"),
        "HOST_OS_RELEASE": str(tmp_path / "host/etc/os-release"),
        "MODULE_WAIT_TIMEOUT": "0",
        "USERSPACE_ROOT": str(tmp_path / "image"),
    }.items():
        monkeypatch.setenv(key, value)
    from driver_container.cli import main

    with pytest.raises(SystemExit):
        main(["init", "--no-wait"])
    results = [
        r.body["metadata"]["annotations"].get(f"{PREFIX}result")
        for r in st.requests
        if r.method == "PATCH" and "annotations" in r.body["metadata"]
    ]
    assert results == ["pending", "refused"]
    assert st.annotations[f"{PREFIX}pod"] == f"{NS}/{POD}" and st.annotations[f"{PREFIX}image"] == IMAGE


def test_a_ready_verdict_carries_pod_image_and_build(cluster: Server) -> None:
    cluster.state.objects[POD_PATH] = _pod()
    state = inspect_host(fixture_paths(FIXTURES / "hosts" / "talos-1.13-open-595"), Settings())
    report_ready(Published(state, "595.91.07"), Cluster.from_env(os.environ))
    ann = cluster.state.annotations
    assert ann[f"{PREFIX}result"] == "ready"
    assert ann[f"{PREFIX}pod"] == f"{NS}/{POD}"
    assert ann[f"{PREFIX}image"] == IMAGE
    assert ann[f"{PREFIX}build"] == f"{__version__}@{DIGEST}"


def test_the_pre_installed_relabel_replaces_a_ready_verdict(cluster: Server, tmp_path: Path) -> None:
    st = cluster.state
    st.objects[POD_PATH] = _pod(started=False)
    st.annotations[f"{PREFIX}result"] = "ready"
    options = ManagerOptions(node_name=NODE, operator_namespace=NS, host_driver_delay=0)
    with pytest.raises(HostDriverPresentError):
        run_uninstall(
            HostPaths(run_dir=tmp_path),
            Settings(cluster=Cluster.from_env(IN_CLUSTER)),
            options,
            runner=Runner(),
            api_factory=lambda: _client(cluster),
            facts=_facts(host_smi=Path("/usr/bin/nvidia-smi")),
        )
    assert st.annotations[f"{PREFIX}result"] == "pre-installed"
    assert "nvidia.com/gpu.deploy.driver=pre-installed" in st.annotations[f"{PREFIX}reason"]
    assert st.labels["nvidia.com/gpu.deploy.driver"] == "pre-installed"


# -- SIGTERM: final stop, replacement, restart ------------------------------------------------------------


@pytest.fixture
def mounted_root(tmp_path: Path) -> Iterator[HostPaths]:
    """A real tmpfs root (MOUNT_SOURCE) at RUN_DIR/driver with a tmpfs at its sys, like init's."""
    paths = HostPaths(run_dir=tmp_path / "run")
    with tmpfs(paths.driver_root, "mode=0755,nosuid", shared=False, source=MOUNT_SOURCE):
        (paths.driver_root / "sys").mkdir()
        (paths.driver_root / "bin").mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "root-sys", str(paths.driver_root / "sys")], check=True, timeout=30)
        yield paths
    assert _mounts_below(tmp_path) == [], "mounts left behind"


def _on_signal(paths: HostPaths) -> str:
    from driver_container.lifecycle.finalstop import on_signal

    return on_signal(paths, Runner(), Cluster.from_env(os.environ)).kind


def _verdict(server: Server) -> None:
    server.state.annotations.update(
        {f"{PREFIX}result": "ready", f"{PREFIX}pod": f"{NS}/{POD}", f"{PREFIX}heal": "an other helper's key"}
    )


@pytest.mark.parametrize(
    "daemonset",
    [None, _daemonset({"nvidia.com/gpu.deploy.driver": "true"}, deleting=True), _daemonset({"pool": "other"})],
    ids=["daemonset-gone", "daemonset-deleting", "no-longer-selected"],
)
def test_a_final_stop_unmounts_the_root_and_clears_the_verdict(
    cluster: Server, mounted_root: HostPaths, daemonset: dict[str, Any] | None
) -> None:
    st = cluster.state
    _verdict(cluster)
    st.objects[POD_PATH] = _pod(deleting=True)
    if daemonset is not None:
        st.objects[DS_PATH] = daemonset
    assert _on_signal(mounted_root) == "final"
    assert _mounts_below(mounted_root.driver_root) == []
    assert not [key for key in st.annotations if key.startswith(PREFIX)]


def test_a_deleted_pod_whose_daemonset_still_selects_the_node_leaves_pending_and_the_root(
    cluster: Server, mounted_root: HostPaths
) -> None:
    st = cluster.state
    _verdict(cluster)
    st.objects[POD_PATH] = _pod(deleting=True)
    st.objects[DS_PATH] = _daemonset({"nvidia.com/gpu.deploy.driver": "true"})
    assert _on_signal(mounted_root) == "replaced"
    root = str(mounted_root.driver_root)
    assert _mounts_below(mounted_root.driver_root) == [root, f"{root}/sys"]
    assert st.annotations[f"{PREFIX}result"] == "pending"
    assert st.annotations[f"{PREFIX}pod"] == f"{NS}/{POD}"  # the old pod: an image-pull failure leaves this
    assert st.annotations[f"{PREFIX}image"] == IMAGE


def test_a_container_restart_keeps_the_root_and_the_verdict(cluster: Server, mounted_root: HostPaths) -> None:
    st = cluster.state
    _verdict(cluster)
    before = dict(st.annotations)
    st.objects[POD_PATH] = _pod()  # not being deleted
    assert _on_signal(mounted_root) == "restart"
    assert len(_mounts_below(mounted_root.driver_root)) == 2
    assert st.annotations == before
    assert [r.method for r in st.requests] == ["GET"]


def test_a_stalled_api_keeps_everything_within_the_budget(cluster: Server, mounted_root: HostPaths) -> None:
    cluster.state.objects[POD_PATH] = _pod(deleting=True)
    cluster.state.stall = 5.0
    start = time.monotonic()
    assert _on_signal(mounted_root) == "unknown"
    assert time.monotonic() - start < 1.5
    assert len(_mounts_below(mounted_root.driver_root)) == 2


# -- the waiting init, as a process -------------------------------------------------------------------------


def _kubeconfig(server: Server, path: Path) -> Path:
    assert server.ca is not None
    ca = base64.b64encode(server.ca.read_bytes()).decode()
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- cluster:\n    server: {server.url}\n    certificate-authority-data: {ca}\n  name: c\n"
        "contexts:\n- context:\n    cluster: c\n    user: u\n  name: c\ncurrent-context: c\n"
        f"users:\n- name: u\n  user:\n    token: {TOKEN}\n"
    )
    return path


@pytest.mark.timeout(180)
def test_the_waiting_init_keeps_its_root_on_a_restart_and_frees_it_on_a_final_stop(
    server: Server, tmp_path: Path
) -> None:
    require(os.geteuid() == 0 and shutil.which("mount"), "root and mount(8) (a real tmpfs root)")
    host = make_host(tmp_path / "h")
    env = {
        "NODE_NAME": NODE,
        "POD_NAME": POD,
        "OPERATOR_NAMESPACE": NS,
        "KUBECONFIG": str(_kubeconfig(server, tmp_path / "kubeconfig")),
    }
    st = server.state
    st.objects[POD_PATH] = _pod()
    with tmpfs(host.driver_root, "mode=0755,nosuid", shared=False, source=MOUNT_SOURCE):
        # A container restart; a deletion the API does not answer in time; a deletion with no DaemonSet left.
        for deleted, stall in ((False, 0.0), (True, 5.0), (True, 0.0)):
            st.objects[POD_PATH] = _pod()
            st.annotations.clear()
            proc = host.start("init", **env)
            wait_until(lambda: st.annotations.get(f"{PREFIX}result") == "ready", "the ready verdict", timeout=120)
            assert st.annotations[f"{PREFIX}build"] == f"{__version__}@{DIGEST}"
            if deleted:
                st.objects[POD_PATH] = _pod(deleting=True)  # kubectl delete pod, its DaemonSet gone
            st.stall = stall
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=30)
            took = time.monotonic() - sent
            assert proc.returncode == 0, stderr
            assert took < 2.0, f"SIGTERM answered after {took:.2f} s"
            st.stall = 0.0
            if not deleted or stall:  # a container restart, or not known in time: the root and the verdict stay
                assert _mounts_below(host.driver_root)[:1] == [str(host.driver_root)]
                assert st.annotations[f"{PREFIX}result"] == "ready"
        assert _mounts_below(host.driver_root) == [], stderr
        assert not [key for key in st.annotations if key.startswith(PREFIX)]
    assert host.tool_calls() == []


# -- driver-manager uninstall --------------------------------------------------------------------------------


def test_driver_manager_uninstall_unmounts_and_clears_twice_in_a_row(
    cluster: Server, mounted_root: HostPaths, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from driver_container.cli.manager_cmd import main

    _verdict(cluster)
    monkeypatch.setenv("RUN_DIR", str(mounted_root.run_dir))
    with pytest.raises(SystemExit) as done:
        main(["uninstall"])
    assert done.value.code == 0
    assert _mounts_below(mounted_root.driver_root) == []
    assert not [key for key in cluster.state.annotations if key.startswith(PREFIX)]
    assert f"unmounted {mounted_root.driver_root}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as again:
        main(["uninstall"])  # idempotent: nothing left, and it says so
    assert again.value.code == 0
    out = capsys.readouterr().out
    assert f"nothing mounted at {mounted_root.driver_root}" in out and "annotations removed" in out
