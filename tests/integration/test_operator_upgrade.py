"""Day two through gpu-operator v26.7.0's own rendering (tests/helpers/operator_render.py): a three-step Talos
upgrade with the quickstart's NVIDIADriver, what a ClusterPolicy does to the same cluster midway, and a
project release through the versioned channel (docs/image.md, "Channel or digest").

Rows of release/talos-drivers.toml: Talos v1.13.8 ships production 595.71.05, v1.13.9 ships 595.91.07.
Each step renders with the previous step's objects and labelled nodes passed back in (the operator's
DaemonSets and ConfigMap, its node labels: what the API server keeps between reconciles), only the upgraded
nodes' NFD ``VERSION_ID`` changed, as ``talosctl upgrade`` and NFD leave them. A node "on" a DaemonSet is
one its nodeSelector matches: the DaemonSet controller deletes a daemon pod from a node its DaemonSet no
longer selects and creates one where it does, whatever the update strategy (kubernetes/kubernetes
pkg/controller/daemon/daemon_controller.go ``podsShouldBeOnNode``), so no step needs a hand. Each new pool
runs as a new service account, which docs/deploy/driver-events-rbac.yaml must cover for its Events.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.hostenv import HOSTS, USERSPACE, make_host
from helpers.operator_render import (
    OS_VERSION_LABEL,
    Rendered,
    clusterpolicy_from_values,
    deploy_objects,
    render,
    require_renderer,
    stored,
    talos_node,
)
from helpers.rbac import Authorizer, service_account_user
from helpers.release import release_matrix
from helpers.restamp import FIXTURE_RELEASE, restamped
from helpers.support import REPO

OLD, NEW = "v1.13.8", "v1.13.9"
NODES = ("gpu-a", "gpu-b", "gpu-c")
STEPS = ({n: OLD for n in NODES}, {"gpu-a": NEW, "gpu-b": OLD, "gpu-c": OLD}, {n: NEW for n in NODES})
REGISTRY = "ghcr.io/example"
REPOSITORY = f"{REGISTRY}/talos-nvidia-driver"
KERNEL = "6.18.44-talos"  # the fixture host's kernel, given to both releases

rm = release_matrix()


def _events_allowed(ds: dict[str, Any]) -> bool:
    """Whether docs/deploy/driver-events-rbac.yaml lets this DaemonSet's pods post their refusal Event."""
    manifest = [d for d in yaml.safe_load_all((REPO / "docs/deploy/driver-events-rbac.yaml").read_text()) if d]
    namespace, account = ds["metadata"]["namespace"], ds["spec"]["template"]["spec"]["serviceAccountName"]
    return Authorizer(manifest)(
        service_account_user(namespace, account), "POST", f"/api/v1/namespaces/{namespace}/events"
    )


def _documented(test: str) -> None:
    """docs/operator.md, "Mixed clusters", names the test that proves what it says."""
    assert f"{test}`" in (REPO / "docs/operator.md").read_text().split("## Mixed clusters", 1)[-1]


def _shipped(release: str) -> str:
    """The production driver of a Talos release: what its kmod extension loads."""
    (row,) = [r for r in rm.load() if r.release == release]
    return str(row.production)


def _driver_of(image: str) -> str:
    """The driver whose published image carries this tag (release-matrix.py ``tags``)."""
    releases = rm.load()
    (driver,) = [d for d in rm.drivers(releases) if image in rm.tags(releases, d, REPOSITORY)]
    return str(driver)


def _relabelled(nodes: list[dict[str, Any]], releases: dict[str, str]) -> list[dict[str, Any]]:
    """The nodes after ``talosctl upgrade`` of those whose release changed, as NFD relabels them."""
    out = stored(nodes)
    for node in out:
        release = releases[node["metadata"]["name"]]
        node["metadata"]["labels"][OS_VERSION_LABEL] = release
        node["status"]["nodeInfo"]["osImage"] = f"Talos ({release})"
    return out


def _selecting(rendered: Rendered, node: dict[str, Any]) -> list[dict[str, Any]]:
    labels = node["metadata"]["labels"]
    return [
        ds
        for ds in rendered.daemonsets
        if all(labels.get(k) == v for k, v in ds["spec"]["template"]["spec"]["nodeSelector"].items())
    ]


class Trees:
    """Talos hosts and images re-stamped to a driver and release (tests/helpers/restamp.py), made once."""

    def __init__(self, base: Path) -> None:
        self.base, self.runs = base, 0

    def _tree(self, kind: str, source: Path, driver: str, release: str) -> Path:
        dest = self.base / f"{kind}-{driver}-{release}"
        return dest if dest.is_dir() else restamped(source, dest, driver, release)

    def init(self, release: str, image_driver: str) -> tuple[int, str, str | None]:
        """``init --no-wait`` on a host of ``release`` (modules of the driver it ships loaded) with the
        userspace of ``image_driver``: exit status, stderr, status word."""
        host_tree = self._tree("host", HOSTS / "talos-1.13-open-595", _shipped(release), release)
        userspace = self._tree("userspace", USERSPACE, image_driver, FIXTURE_RELEASE)
        self.runs += 1
        host = make_host(self.base / f"run-{self.runs}", str(host_tree), userspace)
        done = host.run("init", "--no-wait")
        return done.returncode, done.stderr, host.status()


@pytest.mark.timeout(300)
def test_a_three_step_talos_upgrade_keeps_every_node_on_the_image_of_the_driver_it_loads(tmp_path: Path) -> None:
    require_renderer()
    assert {r: _shipped(r) for r in (OLD, NEW)} == {OLD: "595.71.05", NEW: "595.91.07"}  # a driver change
    crs = deploy_objects("nvidiadriver.yaml", REGISTRY)  # as shipped, the registry filled
    trees = Trees(tmp_path / "trees")
    nodes, objects = [talos_node(n, OLD, kernel=KERNEL) for n in NODES], []
    pools: dict[str, list[dict[str, Any]]] = {}  # release -> its DaemonSet's spec at each step
    for step, releases in enumerate(STEPS, 1):
        rendered = render(
            nodes=_relabelled(nodes, releases), nvidiadrivers=crs, objects=objects, tmp=tmp_path / f"{step}"
        )
        assert {n["metadata"]["name"] for n in rendered.nodes} == set(NODES)
        for node in rendered.nodes:
            release = releases[node["metadata"]["name"]]
            (ds,) = _selecting(rendered, node)  # exactly one: the old pool's no longer selects an upgraded node
            image = Rendered.container(ds, "nvidia-driver-ctr")["image"]
            assert image == f"{REPOSITORY}:production-talos{release}", (step, node["metadata"]["name"])
            assert _driver_of(image) == _shipped(release)
            code, stderr, status = trees.init(release, _driver_of(image))
            assert code == 0 and status == "Ready", (step, node["metadata"]["name"], stderr[-3000:])
            assert _events_allowed(ds)  # the new pool's own service account still posts its Events
        # One DaemonSet per release still present: at step 3 the operator has deleted the v1.13.8 pool's.
        assert len(rendered.daemonsets) == len(set(releases.values()))
        for ds in rendered.daemonsets:
            assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
            (release,) = {v for k, v in ds["spec"]["template"]["spec"]["nodeSelector"].items() if k == OS_VERSION_LABEL}
            pools.setdefault(release, []).append(ds["spec"])
        nodes, objects = stored(rendered.nodes), stored(rendered.objects)
    assert len(pools[OLD]) == 2 and pools[OLD][0] == pools[OLD][1]  # the v1.13.8 nodes' pods untouched midway
    assert len(pools[NEW]) == 2 and pools[NEW][0] == pools[NEW][1]
    # The crossed pairing is what the pods would meet without per-release pools: refused.
    code, stderr, status = trees.init(OLD, _shipped(NEW))
    assert code != 0 and "VERSION_MISMATCH" in stderr and status != "Ready", stderr[-3000:]
    _documented("test_a_three_step_talos_upgrade_keeps_every_node_on_the_image_of_the_driver_it_loads")


@pytest.mark.timeout(120)
def test_under_a_clusterpolicy_the_mixed_step_gives_every_node_the_tag_of_one_node(tmp_path: Path) -> None:
    """``getGPUNodeOSInfo`` lists GPU nodes with ``Limit(1)`` and takes that node's OS tag for the one
    DaemonSet (NVIDIA/gpu-operator controllers/state_manager.go at v26.7.0 10ee5b3638b8): with the nodes
    mixed, the nodes of the other release get an image whose driver they do not load."""
    require_renderer()
    (values,) = deploy_objects("gpu-operator-values.yaml", REGISTRY)
    policy = clusterpolicy_from_values(values)
    seen = {}
    for upgraded in ("gpu-a", "gpu-c"):  # the node first by name, then the last
        releases = {n: NEW if n == upgraded else OLD for n in NODES}
        nodes = [talos_node(n, releases[n], kernel=KERNEL) for n in NODES]
        rendered = render(nodes=nodes, clusterpolicy=policy, tmp=tmp_path / upgraded)
        (ds,) = rendered.daemonsets
        assert all(_selecting(rendered, node) == [ds] for node in rendered.nodes)
        image = Rendered.container(ds, "nvidia-driver-ctr")["image"]
        wrong = sorted(n for n in NODES if _shipped(releases[n]) != _driver_of(image))
        seen[upgraded] = (image, wrong)
    assert seen == {
        "gpu-a": (f"{REPOSITORY}:production-talos{NEW}", ["gpu-b", "gpu-c"]),
        "gpu-c": (f"{REPOSITORY}:production-talos{OLD}", ["gpu-c"]),
    }
    _documented("test_under_a_clusterpolicy_the_mixed_step_gives_every_node_the_tag_of_one_node")


def _versioned(crs: list[dict[str, Any]], project: str) -> list[dict[str, Any]]:
    out = copy.deepcopy(crs)
    (cr,) = out
    cr["spec"]["version"] = f"production-{project}"
    cr["spec"]["manager"]["version"] = f"manager-{project}"
    return out


@pytest.mark.timeout(120)
def test_a_versioned_channel_gives_each_pool_its_release_tag_and_a_project_release_rolls(tmp_path: Path) -> None:
    require_renderer()
    project, releases = rm.project_version(), rm.load()
    crs = deploy_objects("nvidiadriver.yaml", REGISTRY)
    nodes = [talos_node("gpu-a", OLD, kernel=KERNEL), talos_node("gpu-b", NEW, kernel=KERNEL)]
    moving = render(nodes=nodes, nvidiadrivers=crs, tmp=tmp_path / "moving")
    # A project release re-pushes production-talos<R>: the next reconcile renders the same templates, so no
    # pod is recreated (OnDelete or not): nodes keep the build they run.
    again = render(nodes=stored(moving.nodes), nvidiadrivers=crs, objects=stored(moving.objects), tmp=tmp_path / "a")
    assert [d["spec"] for d in again.daemonsets] == [d["spec"] for d in moving.daemonsets]
    # The one-line change to the versioned channel: every pool's template changes, to the immutable tag.
    pinned = render(
        nodes=stored(moving.nodes),
        nvidiadrivers=_versioned(crs, project),
        objects=stored(moving.objects),
        tmp=tmp_path / "pinned",
    )
    before = {d["metadata"]["name"]: d["spec"]["template"] for d in moving.daemonsets}
    assert sorted(before) == sorted(d["metadata"]["name"] for d in pinned.daemonsets)
    for ds in pinned.daemonsets:
        (release,) = {v for k, v in ds["spec"]["template"]["spec"]["nodeSelector"].items() if k == OS_VERSION_LABEL}
        image = Rendered.container(ds, "nvidia-driver-ctr")["image"]
        assert image == f"{REPOSITORY}:production-{project}-talos{release}"
        assert _driver_of(image) == _shipped(release)  # published on the image of the driver R ships
        manager = Rendered.container(ds, "k8s-driver-manager")["image"]
        assert manager == f"{REPOSITORY}:manager-{project}"
        assert manager in rm.tags(releases, rm.manager_driver(releases), REPOSITORY)
        assert ds["spec"]["template"] != before[ds["metadata"]["name"]]  # rolls: OnDelete or upgrade controller
