"""Whether this driver pod should replace itself: a pure decision on what the API and the host said.

The operator's driver DaemonSet is always ``OnDelete`` (NVIDIA/gpu-operator controllers/object_controls.go
at v26.7.0, 10ee5b3638b8: the driver is left out of ``daemonsets.updateStrategy``), and ``talosctl
upgrade`` keeps DaemonSet pods. So after a Talos upgrade that changes the driver, or any change of the
driver settings, the pod that comes back after the reboot still runs the old template; only a deletion
makes the DaemonSet controller create it from the current one. The rule (docs/manager.md, "A stale pod
heals") evicts this pod only where that cannot make things worse and cannot loop:

* a pod whose images equal its template's is current: never evicted (its replacement would be the same);
* a node managed by the operator's upgrade controller (``nvidia.com/gpu-driver-upgrade-enabled=true``,
  controllers/state_manager.go ``driverAutoUpgradeAnnotationKey``) is left to it;
* with the nvidia module not loaded nothing says which image the node needs;
* otherwise a stale pod goes when it cannot serve the loaded driver, or when the template names the loaded
  driver, or (neither version known from the tags) when the template's tag is for the node's Talos
  release and this pod's for another; a pod that serves the loaded driver while the template names
  another (the settings changed ahead of Talos) is kept;
* at most once per pod: a second start of the same pod asks for ``kubectl delete pod``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Action = Literal["current", "keep", "evict", "ask-delete"]


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the decision needs; versions are NVIDIA driver versions, releases Talos releases (v1.13.9)."""

    pod_images: Mapping[str, str]  # container -> image of this pod
    template_images: Mapping[str, str] | None  # of its DaemonSet's current template (None: not found)
    upgrade_managed: bool
    loaded: str | None  # the loaded nvidia module's version (None: not loaded)
    pod_driver: str | None  # the driver this pod's image runs, where known
    template_driver: str | None  # the driver the template's tag names, where it names one
    pod_release: str | None = None  # the Talos release of this pod's tag (``-talos<R>``)
    template_release: str | None = None
    node_release: str | None = None
    already_tried: bool = False  # this pod (uid) was evicted once already


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: str


def _needs_template(facts: PodFacts) -> str | None:
    """Why the current template serves this node better than this pod, or None."""
    loaded = facts.loaded
    if facts.pod_driver is not None and facts.pod_driver != loaded:
        return f"this pod runs {facts.pod_driver}, the node loads {loaded}"
    if facts.template_driver is not None and facts.template_driver == loaded:
        return f"the template names the loaded driver {loaded}"
    if (
        facts.pod_driver is None
        and facts.template_driver is None
        and facts.node_release is not None
        and facts.template_release == facts.node_release
        and facts.pod_release != facts.node_release
    ):
        return (
            f"the template's tag is for Talos {facts.node_release}, the node's release; "
            f"this pod's for {facts.pod_release or 'no release'}"
        )
    return None


def decide(facts: PodFacts) -> Decision:
    """The decision table of the module doc, first matching row wins."""
    if facts.template_images is None:
        return Decision("keep", "no DaemonSet template to compare this pod with")
    if dict(facts.pod_images) == dict(facts.template_images):
        return Decision("current", "this pod's images are its DaemonSet's current template's")
    if facts.upgrade_managed:
        return Decision("keep", "stale, but the operator's upgrade controller manages this node and replaces it")
    if facts.loaded is None:
        return Decision("keep", "stale, but nvidia is not loaded: nothing says which image the node needs")
    why = _needs_template(facts)
    if why is None:
        return Decision(
            "keep",
            f"stale, but this pod serves the loaded driver {facts.loaded} and nothing shows the template does",
        )
    if facts.already_tried:
        return Decision("ask-delete", f"stale ({why}) and already evicted once")
    return Decision("evict", f"stale: {why}")
