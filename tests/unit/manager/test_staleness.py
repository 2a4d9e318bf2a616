"""The decision table of manager/staleness.py: which stale pod replaces itself, and never a current one."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver_container.manager.staleness import PodFacts, decide

OLD = {"k8s-driver-manager": "r/d:manager", "nvidia-driver-ctr": "r/d:production-talosv1.13.8"}
NEW = {"k8s-driver-manager": "r/d:manager", "nvidia-driver-ctr": "r/d:production-talosv1.13.9"}
# A stale pod after a Talos upgrade v1.13.8 -> v1.13.9 (595.71.05 -> 595.91.07) under `version: production`.
BASE = PodFacts(
    pod_images=OLD,
    template_images=NEW,
    upgrade_managed=False,
    loaded="595.91.07",
    pod_driver=None,
    template_driver=None,
    pod_release="v1.13.8",
    template_release="v1.13.9",
    node_release="v1.13.9",
)


@pytest.mark.parametrize(
    ("change", "action"),
    [
        ({}, "evict"),  # the template's tag is for the node's release, the pod's for another
        ({"already_tried": True}, "ask-delete"),  # at most once per pod
        ({"template_images": OLD}, "current"),  # never evict a current pod
        ({"template_images": OLD, "pod_driver": "1.0", "already_tried": True}, "current"),
        ({"template_images": None}, "keep"),  # no DaemonSet found
        ({"upgrade_managed": True}, "keep"),  # the upgrade controller's node
        ({"upgrade_managed": True, "pod_driver": "595.71.05"}, "keep"),
        ({"loaded": None}, "keep"),  # nothing says which image the node needs
        ({"pod_driver": "595.71.05"}, "evict"),  # this pod cannot serve the loaded driver
        ({"pod_driver": "595.71.05", "template_release": "v1.13.8"}, "evict"),
        ({"pod_driver": "595.91.07", "template_driver": "595.91.07"}, "evict"),  # a project release, same driver
        ({"pod_driver": "595.91.07", "template_driver": "600.1.2"}, "keep"),  # template ahead of Talos: keep
        ({"pod_driver": "595.91.07", "template_release": "v1.13.9", "template_driver": None}, "keep"),
        ({"template_driver": "595.91.07"}, "evict"),  # the template names the loaded driver
        ({"template_driver": "600.1.2", "template_release": "v1.13.9"}, "keep"),  # names another one
        ({"template_release": "v1.13.8", "pod_release": "v1.13.9"}, "keep"),  # the pod's is the node's release
        ({"template_release": None}, "keep"),
        ({"node_release": None}, "keep"),
    ],
)
def test_decision_table(change: dict[str, object], action: str) -> None:
    assert decide(replace(BASE, **change)).action == action  # type: ignore[arg-type]


def test_reasons_say_why() -> None:
    assert decide(BASE).reason == (
        "stale: the template's tag is for Talos v1.13.9, the node's release; this pod's for v1.13.8"
    )
    assert (
        decide(replace(BASE, pod_driver="595.71.05")).reason
        == "stale: this pod runs 595.71.05, the node loads 595.91.07"
    )


_version = st.none() | st.sampled_from(["595.71.05", "595.91.07", "600.1.2"])
_release = st.none() | st.sampled_from(["v1.13.8", "v1.13.9"])


@given(
    same=st.booleans(),
    managed=st.booleans(),
    loaded=_version,
    pod=_version,
    template=_version,
    releases=st.tuples(_release, _release, _release),
    tried=st.booleans(),
)
def test_invariants(
    same: bool,
    managed: bool,
    loaded: str | None,
    pod: str | None,
    template: str | None,
    releases: tuple[str | None, str | None, str | None],
    tried: bool,
) -> None:
    facts = PodFacts(OLD, OLD if same else NEW, managed, loaded, pod, template, *releases, already_tried=tried)
    action = decide(facts).action
    if same:
        assert action == "current"  # no restart loop
    if action in ("evict", "ask-delete"):
        assert not managed and loaded is not None and not same
        assert action == ("ask-delete" if tried else "evict")  # at most one eviction per pod
        # never a pod that serves the loaded driver for a template that names another one
        assert not (pod == loaded and template is not None and template != loaded)
