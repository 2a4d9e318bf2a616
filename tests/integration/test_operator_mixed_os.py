"""Talos and Ubuntu GPU nodes in one cluster: docs/deploy/nvidiadriver.yaml beside
docs/deploy/nvidiadriver-mixed-os.yaml (NVIDIA's driver as the default NVIDIADriver), rendered by
gpu-operator v26.7.0's own code (tests/helpers/operator_render.py): Talos nodes get this project's image for
their release, Ubuntu nodes NVIDIA's for theirs, each node exactly one DaemonSet. Without ``default: true``
the two CRs overlap on the Talos nodes and the operator refuses the pair; without the recipe the Ubuntu
nodes get no driver at all (NVIDIA/gpu-operator internal/nvidiadriver/nvidiadriver.go ``AssignOwners``,
internal/validator/validator.go, at v26.7.0 10ee5b3638b8).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.operator_render import (
    OS_ID_LABEL,
    Rendered,
    deploy_objects,
    render,
    require_renderer,
    talos_node,
    ubuntu_node,
)
from helpers.release import release_matrix

REGISTRY = "ghcr.io/example"
REPOSITORY = f"{REGISTRY}/talos-nvidia-driver"
OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"

rm = release_matrix()


def _nodes() -> list[dict[str, Any]]:
    return [
        talos_node("talos-1", "v1.13.9"),
        talos_node("talos-2", "v1.14.0-rc.1"),
        ubuntu_node("ubuntu-1", "24.04"),
        ubuntu_node("ubuntu-2", "22.04", kernel="5.15.0-140-generic"),
    ]


def _recipe() -> list[dict[str, Any]]:
    return deploy_objects("nvidiadriver.yaml", REGISTRY) + deploy_objects("nvidiadriver-mixed-os.yaml", REGISTRY)


def _images_by_node(rendered: Rendered) -> dict[str, tuple[str, str]]:
    """Node -> (driver image, manager image) of the one DaemonSet whose nodeSelector matches it."""
    out = {}
    for node in rendered.nodes:
        labels = node["metadata"]["labels"]
        selecting = [
            ds
            for ds in rendered.daemonsets
            if all(labels.get(k) == v for k, v in ds["spec"]["template"]["spec"]["nodeSelector"].items())
        ]
        (ds,) = selecting
        driver, manager = (Rendered.container(ds, c)["image"] for c in ("nvidia-driver-ctr", "k8s-driver-manager"))
        out[node["metadata"]["name"]] = (driver, manager)
    return out


@pytest.mark.timeout(120)
def test_talos_nodes_get_this_image_and_ubuntu_nodes_nvidias(tmp_path: Path) -> None:
    require_renderer()
    crs = _recipe()
    assert [cr["spec"].get("default", False) for cr in crs] == [False, True]
    rendered = render(nodes=_nodes(), nvidiadrivers=crs, tmp=tmp_path / "mixed")
    nvidia = crs[1]["spec"]
    assert _images_by_node(rendered) == {
        "talos-1": (f"{REPOSITORY}:production-talosv1.13.9", f"{REPOSITORY}:manager"),
        "talos-2": (f"{REPOSITORY}:production-talosv1.14.0-rc.1", f"{REPOSITORY}:manager"),
        "ubuntu-1": (
            "nvcr.io/nvidia/driver:595.91.07-ubuntu24.04",
            "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0",
        ),
        "ubuntu-2": (
            "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04",
            "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0",
        ),
    }
    assert nvidia["version"] == "595.91.07"
    owners = {n["metadata"]["name"]: n["metadata"]["labels"][OWNER_LABEL] for n in rendered.nodes}
    assert owners == {"talos-1": "talos", "talos-2": "talos", "ubuntu-1": "default", "ubuntu-2": "default"}
    # Every Talos image is one the release matrix publishes.
    releases = rm.load()
    published = {t for d in rm.drivers(releases) for t in rm.tags(releases, d, REPOSITORY)}
    talos = {n["metadata"]["name"] for n in rendered.nodes if n["metadata"]["labels"][OS_ID_LABEL] == "talos"}
    assert {
        image for name, images in _images_by_node(rendered).items() if name in talos for image in images
    } <= published


@pytest.mark.timeout(120)
def test_without_the_default_flag_the_two_crs_overlap_and_without_the_recipe_ubuntu_gets_no_driver(
    tmp_path: Path,
) -> None:
    require_renderer()
    talos_cr, nvidia_cr = _recipe()
    nvidia_cr["spec"]["default"] = False  # no nodeSelector: it selects every GPU node, Talos ones too
    with pytest.raises(RuntimeError, match="multiple NVIDIADrivers match the same node"):
        render(nodes=_nodes(), nvidiadrivers=[talos_cr, nvidia_cr], tmp=tmp_path / "overlap")
    alone = render(nodes=_nodes(), nvidiadrivers=[talos_cr], tmp=tmp_path / "alone")
    ubuntu = [n for n in alone.nodes if n["metadata"]["labels"][OS_ID_LABEL] == "ubuntu"]
    assert len(ubuntu) == 2 and all(OWNER_LABEL not in n["metadata"]["labels"] for n in ubuntu)
    assert {ds["spec"]["template"]["spec"]["nodeSelector"][OS_ID_LABEL] for ds in alone.daemonsets} == {"talos"}
