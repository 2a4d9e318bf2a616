"""This pod's owner and images from the objects the API answers (kube/ownpod.py)."""

from __future__ import annotations

from typing import Any

from driver_container.kube.ownpod import image_id, images, owner_daemonset

POD: dict[str, Any] = {
    "metadata": {
        "name": "nvidia-driver-daemonset-x7k2p",
        "ownerReferences": [
            {"kind": "ReplicaSet", "name": "not-me", "controller": False},
            {"kind": "DaemonSet", "name": "nvidia-driver-daemonset", "controller": True},
        ],
    },
    "spec": {
        "initContainers": [{"name": "k8s-driver-manager", "image": "r/d:manager"}],
        "containers": [{"name": "nvidia-driver-ctr", "image": "r/d:production-talosv1.13.8"}, {"name": 3}],
    },
    "status": {"containerStatuses": [{"name": "nvidia-driver-ctr", "imageID": "r/d@sha256:" + "ab" * 32}]},
}


def test_owner_is_the_controlling_daemonset_only() -> None:
    assert owner_daemonset(POD) == "nvidia-driver-daemonset"
    assert owner_daemonset({"metadata": {"ownerReferences": [{"kind": "DaemonSet", "name": "x"}]}}) is None
    assert owner_daemonset({"metadata": {"ownerReferences": "junk"}}) is None


def test_images_of_a_pod_and_of_a_daemonset_template() -> None:
    expected = {"k8s-driver-manager": "r/d:manager", "nvidia-driver-ctr": "r/d:production-talosv1.13.8"}
    assert images(POD) == expected
    assert images({"spec": {"template": {"spec": POD["spec"]}}}) == expected
    assert images({"spec": {"containers": "junk"}}) == {}


def test_image_id_from_the_container_status() -> None:
    assert image_id(POD) == "r/d@sha256:" + "ab" * 32
    assert image_id(POD, "k8s-driver-manager") is None
    assert image_id({"status": {"containerStatuses": [{"name": "nvidia-driver-ctr", "imageID": ""}]}}) is None
