"""This pod as the API sees it: its name, the DaemonSet that owns it, the images of its containers.

The operator's driver DaemonSet names its containers ``k8s-driver-manager`` (init) and ``nvidia-driver-ctr``
and sets ``hostPID`` but not ``hostNetwork`` (NVIDIA/gpu-operator ``assets/state-driver/0500_daemonset.yaml``
and ``manifests/state-driver/0500_daemonset.yaml`` at v26.7.0, 10ee5b3638b8), so a pod's hostname is its
name: ``POD_NAME`` (a fieldRef some manifests set) wins, ``HOSTNAME`` is the fallback (``settings.Cluster``
reads them). Pure functions of the
objects the API answered; the calls live in ``client.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

DRIVER_CONTAINER: Final = "nvidia-driver-ctr"
MANAGER_CONTAINER: Final = "k8s-driver-manager"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _mappings(value: object) -> list[Mapping[str, Any]]:
    """The mappings of a JSON list (anything else in it, or a non-list, is skipped)."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def owner_daemonset(pod: Mapping[str, Any]) -> str | None:
    """The name of the DaemonSet that controls ``pod`` (its controller ownerReference), or None."""
    for ref in _mappings(_mapping(pod.get("metadata")).get("ownerReferences")):
        if ref.get("kind") == "DaemonSet" and ref.get("controller") is True and isinstance(ref.get("name"), str):
            return str(ref["name"])
    return None


def pod_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod spec of a Pod, or of a DaemonSet's pod template."""
    spec = _mapping(obj.get("spec"))
    template = _mapping(spec.get("template"))
    return _mapping(template.get("spec")) if template else spec


def images(obj: Mapping[str, Any]) -> dict[str, str]:
    """Container name -> image, init containers included, of a Pod or a DaemonSet's template."""
    spec = pod_spec(obj)
    found: dict[str, str] = {}
    for key in ("initContainers", "containers"):
        for container in _mappings(spec.get(key)):
            name, image = container.get("name"), container.get("image")
            if isinstance(name, str) and isinstance(image, str):
                found[name] = image
    return found


def image_id(pod: Mapping[str, Any], container: str = DRIVER_CONTAINER) -> str | None:
    """The image the runtime resolved for ``container`` (``status.containerStatuses[].imageID``, a digest
    reference once the container started), or None."""
    status = _mapping(pod.get("status"))
    for key in ("containerStatuses", "initContainerStatuses"):
        for entry in _mappings(status.get(key)):
            if entry.get("name") == container and isinstance(entry.get("imageID"), str) and entry["imageID"]:
                return str(entry["imageID"])
    return None
