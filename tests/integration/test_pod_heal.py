"""Day two under a ClusterPolicy: a stale driver pod heals, and init names who is to act.

The DaemonSets are gpu-operator v26.7.0's own (tests/helpers/operator_render.py renders
docs/deploy/gpu-operator-values.yaml for one node of a Talos release); the pod is made from a template
as the DaemonSet controller makes it; the API is the TLS loopback stand-in (tests/helpers/apiserver.py).
driver-manager runs on a fixture host re-stamped to the release and driver of each case, and ``init
--no-wait`` runs as a process on the same host with the pod context the manager left in RUN_DIR.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.apiserver import NODE, NS, Server, endpoint
from helpers.hostenv import HOSTS, SCENARIO, Host, make_host
from helpers.operator_render import Rendered, clusterpolicy_from_values, render, require_renderer, talos_node
from helpers.restamp import restamped_pairs as restamped
from helpers.support import REPO

from driver_container.base.errors import KubernetesError
from driver_container.base.paths import HostPaths
from driver_container.inspect.podcontext import CONTEXT_FILE
from driver_container.kube.client import KubeClient
from driver_container.kube.endpoint import KubeConfig
from driver_container.manager.facts import gather_facts
from driver_container.manager.manager import ManagerOptions, run_uninstall
from driver_container.runtime.runner import Runner
from driver_container.settings import Settings

OWNER = "ghcr.io/example"
POD = "nvidia-driver-daemonset-x7k2q"
UID = "6f1d2c9e-0000-4000-8000-000000000001"
KERNEL = "6.18.44-talos"  # the fixture host's kernel
FIXTURE_DRIVER, FIXTURE_RELEASE = "595.91.07", "v1.13.9"  # what the fixture host and USERSPACE say
DELETE = f"kubectl delete pod -n {NS} {POD}"

pytestmark = pytest.mark.timeout(180)


def _daemonset(tmp: Path, release: str, version: str) -> dict[str, Any]:
    """The driver DaemonSet the operator renders from the quickstart's values for a node of ``release``."""
    require_renderer()
    (values,) = [d for d in yaml.safe_load_all((REPO / "docs/deploy/gpu-operator-values.yaml").read_text()) if d]
    for section in (values["driver"], values["driver"]["manager"]):
        section["repository"] = OWNER
    values["driver"]["version"] = version
    node = talos_node("gpu-1", release, kernel=KERNEL)
    (ds,) = render(nodes=[node], clusterpolicy=clusterpolicy_from_values(values), tmp=tmp).daemonsets
    return ds


def _pod(ds: dict[str, Any]) -> dict[str, Any]:
    """This node's pod as the DaemonSet controller creates it from ``ds``'s template."""
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds["metadata"]["name"], "controller": True}
    meta = {"name": POD, "namespace": NS, "uid": UID, "ownerReferences": [owner]}
    return {"kind": "Pod", "metadata": meta, "spec": copy.deepcopy(ds["spec"]["template"]["spec"])}


def _serve(server: Server, pod: dict[str, Any], ds: dict[str, Any]) -> None:
    server.state.objects[f"/api/v1/namespaces/{NS}/pods/{POD}"] = pod
    server.state.objects[f"/apis/apps/v1/namespaces/{NS}/daemonsets/{ds['metadata']['name']}"] = ds


def _host(tmp: Path, driver: str, release: str) -> Host:
    tree = HOSTS / SCENARIO
    if (driver, release) != (FIXTURE_DRIVER, FIXTURE_RELEASE):
        tree = restamped(tree, tmp / "tree", [(FIXTURE_DRIVER, driver), (FIXTURE_RELEASE, release)])
        shutil.copyfile(HOSTS / SCENARIO / "env", tree / "env")  # DRIVER_VERSION: the image's, not the host's
    host = make_host(tmp / "node", str(tree))
    boot = host.root / "proc/sys/kernel/random/boot_id"
    boot.parent.mkdir(parents=True, exist_ok=True)
    boot.write_text("0b7e3f8a-boot\n")
    return host


def _manager(host: Host, server: Server) -> str:
    """driver-manager uninstall_driver on ``host``, as this pod, through the TLS API stand-in."""
    paths, settings = HostPaths.from_env(host.env), Settings.from_env({**host.env, "POD_NAME": POD})
    options = ManagerOptions(node_name=NODE, operator_namespace=NS)
    config = KubeConfig(timeout=2.0, attempts=2, backoff=0.05, backoff_max=0.1)
    return run_uninstall(
        paths,
        settings,
        options,
        runner=Runner(),
        api_factory=lambda: KubeClient(endpoint(server), config, sleep=lambda _: None),
        facts=gather_facts(paths, settings),
        sleep=lambda _: None,
    )


def _init(host: Host) -> tuple[int, str]:
    done = host.run("init", "--no-wait", POD_NAME=POD)
    return done.returncode, done.stdout + done.stderr


def test_a_stale_pod_after_a_talos_upgrade_is_evicted_once(server: Server, tmp_path: Path) -> None:
    """v1.13.8 -> v1.13.9 changes the production driver: the pod from before the reboot still runs the
    v1.13.8 template (OnDelete), the node now loads 595.91.07."""
    old, new = _daemonset(tmp_path / "a", "v1.13.8", "production"), _daemonset(tmp_path / "b", "v1.13.9", "production")
    assert Rendered.container(old, "nvidia-driver-ctr")["image"].endswith(":production-talosv1.13.8")
    assert Rendered.container(new, "nvidia-driver-ctr")["image"].endswith(":production-talosv1.13.9")
    host = _host(tmp_path, FIXTURE_DRIVER, FIXTURE_RELEASE)
    _serve(server, _pod(old), new)
    with pytest.raises(KubernetesError) as evicted:
        _manager(host, server)
    assert server.state.evicted == [POD]
    assert "evicted" in evicted.value.message and "Talos v1.13.9" in evicted.value.message
    assert "DaemonSet controller creates the pod again" in (evicted.value.fix or "")
    context = json.loads((host.run_dir / CONTEXT_FILE).read_text())
    assert (context["current"], context["eviction"], context["image_release"]) == (False, "evicted", "v1.13.8")
    # The same pod (uid) starting again: never a second eviction, the one command that replaces it.
    _serve(server, _pod(old), new)
    with pytest.raises(KubernetesError) as again:
        _manager(host, server)
    assert server.state.evicted == [POD]
    assert again.value.fix == DELETE


def test_a_refused_eviction_names_exactly_the_delete_command(server: Server, tmp_path: Path) -> None:
    old, new = _daemonset(tmp_path / "a", "v1.13.8", "production"), _daemonset(tmp_path / "b", "v1.13.9", "production")
    host = _host(tmp_path, FIXTURE_DRIVER, FIXTURE_RELEASE)
    _serve(server, _pod(old), new)
    server.state.forbidden.add(("POST", f"/api/v1/namespaces/{NS}/pods/{POD}/eviction"))
    with pytest.raises(KubernetesError) as refused:
        _manager(host, server)
    assert refused.value.fix == DELETE
    assert server.state.evicted == []
    assert json.loads((host.run_dir / CONTEXT_FILE).read_text())["eviction"] == "refused"


def test_the_upgrade_controllers_node_is_left_to_it(server: Server, tmp_path: Path) -> None:
    old, new = _daemonset(tmp_path / "a", "v1.13.8", "production"), _daemonset(tmp_path / "b", "v1.13.9", "production")
    host = _host(tmp_path, FIXTURE_DRIVER, FIXTURE_RELEASE)
    _serve(server, _pod(old), new)
    server.state.annotations["nvidia.com/gpu-driver-upgrade-enabled"] = "true"
    server.state.labels["nvidia.com/gpu-driver-upgrade-state"] = "upgrade-failed"
    _manager(host, server)
    assert server.state.evicted == []
    code, out = _init(host)  # the old image (595.91.07 userspace here) matches: only the state is named
    assert code == 0, out[-3000:]
    assert "UPGRADE_FAILED: the operator's upgrade controller marked this node upgrade-failed" in out
    status = host.run("status", POD_NAME=POD)
    assert "uncordon-required" in status.stdout and DELETE in status.stdout, status.stdout[-3000:]


def test_a_current_pod_on_modules_not_yet_upgraded_is_kept_and_init_names_the_talos_side(
    server: Server, tmp_path: Path
) -> None:
    """version: 595.91.07 set ahead of `talosctl upgrade`: the node (v1.13.8) still loads 595.71.05."""
    ds = _daemonset(tmp_path / "a", "v1.13.8", "595.91.07")
    host = _host(tmp_path, "595.71.05", "v1.13.8")
    _serve(server, _pod(ds), ds)
    _manager(host, server)
    assert server.state.evicted == []
    assert json.loads((host.run_dir / CONTEXT_FILE).read_text())["eviction"] == "not-needed"
    code, out = _init(host)
    assert code != 0 and "VERSION_MISMATCH" in out, out[-3000:]
    assert "the node's Talos v1.13.8 loads 595.71.05" in out
    assert "upgrade the node with talosctl to the Talos release that ships 595.91.07" in out
    assert "set driver.version=595.91.07" not in out and DELETE not in out


def test_another_releases_tag_is_a_warning_while_the_driver_matches(server: Server, tmp_path: Path) -> None:
    """A ClusterPolicy tags every node with one GPU node's OS: this v1.13.9 node got v1.13.8's tag."""
    ds = _daemonset(tmp_path / "a", "v1.13.8", "595.91.07")
    host = _host(tmp_path, FIXTURE_DRIVER, FIXTURE_RELEASE)
    _serve(server, _pod(ds), ds)
    _manager(host, server)
    code, out = _init(host)
    assert code == 0, out[-3000:]
    assert "IMAGE_RELEASE_MISMATCH" in out
    assert "tagged for Talos v1.13.8 but the node runs Talos v1.13.9" in out and "the driver still matches" in out


def test_another_releases_tag_with_another_driver_names_nvidiadriver(server: Server, tmp_path: Path) -> None:
    """This v1.13.8 node (595.71.05) got v1.13.9's production tag (595.91.07)."""
    ds = _daemonset(tmp_path / "a", "v1.13.9", "production")
    host = _host(tmp_path, "595.71.05", "v1.13.8")
    _serve(server, _pod(ds), ds)
    _manager(host, server)
    assert server.state.evicted == []
    code, out = _init(host)
    assert code != 0 and "VERSION_MISMATCH" in out, out[-3000:]
    assert "this image is tagged for Talos v1.13.9, the node runs Talos v1.13.8" in out
    assert "docs/deploy/nvidiadriver.yaml" in out
    assert "set driver.version" not in out and "version: production" not in out


def test_without_a_pod_context_no_fix_names_a_setting_already_set(tmp_path: Path) -> None:
    """Standalone (no API): the loaded version only, never the channel that may be set already."""
    host = _host(tmp_path, "595.71.05", "v1.13.8")
    code, out = _init(host)
    assert code != 0 and "VERSION_MISMATCH" in out
    assert "set driver.version=595.71.05" in out and "production" not in out and "USERSPACE_VERSION" not in out
