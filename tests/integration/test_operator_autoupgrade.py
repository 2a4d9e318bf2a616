"""`autoUpgrade` as gpu-operator v26.7.0's own code renders it from this project's files, and docs/upgrades.md
saying what that code does.

The renderer (tests/helpers/operator_render.py) runs the operator's node-labeling controller and the driver
state of both paths; it does not run the upgrade controller (no pods exist there). What it shows, and the
page relies on: the driver DaemonSet is ``OnDelete`` whatever the policy (so nothing replaces a stale pod but
the upgrade controller, the stale-pod heal or a user), and the Node annotation
``nvidia.com/gpu-driver-upgrade-enabled=true`` appears exactly when the policy that covers the node has
``autoUpgrade`` on (NVIDIA/gpu-operator ``controllers/nodelabeling_controller.go``
``setDriverAutoUpgradeAnnotation`` at v26.7.0): the signal the heal uses to stand aside. The state machine
itself (vendored NVIDIA/k8s-operator-libs ``pkg/upgrade``) is read at the source; the page must name its
labels, its failure state and the way out.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.operator_render import Rendered, clusterpolicy_from_values, render, require_renderer, talos_node
from helpers.support import REPO

pytestmark = pytest.mark.timeout(120)  # four renders of ~0.6 s each

OWNER = "ghcr.io/example"
ENABLED = "nvidia.com/gpu-driver-upgrade-enabled"
STATE = "nvidia.com/gpu-driver-upgrade-state"
PAGE = REPO / "docs" / "upgrades.md"


def _doc(name: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((REPO / "docs" / "deploy" / name).read_text()) if d]
    return dict(doc)


def _values(auto_upgrade: bool | None) -> dict[str, Any]:
    values = copy.deepcopy(_doc("gpu-operator-values.yaml"))
    for section in (values["driver"], values["driver"]["manager"]):
        section["repository"] = OWNER
    if auto_upgrade is not None:
        values["driver"]["upgradePolicy"]["autoUpgrade"] = auto_upgrade
    return values


def _nvidiadriver(auto_upgrade: bool | None) -> dict[str, Any]:
    cr = copy.deepcopy(_doc("nvidiadriver.yaml"))
    for section in (cr["spec"], cr["spec"]["manager"]):
        section["repository"] = OWNER
    if auto_upgrade is None:
        del cr["spec"]["upgradePolicy"]  # left out: the CRD default and GetUpgradePolicyWithDefaults say true
    return cr


def _render(tmp: Path, *, clusterpolicy: bool, auto_upgrade: bool | None) -> Rendered:
    nodes = [talos_node("gpu-a", "v1.13.9"), talos_node("gpu-b", "v1.14.0-rc.1")]
    if clusterpolicy:
        return render(nodes=nodes, clusterpolicy=clusterpolicy_from_values(_values(auto_upgrade)), tmp=tmp)
    return render(nodes=nodes, nvidiadrivers=[_nvidiadriver(auto_upgrade)], tmp=tmp)


def _annotations(rendered: Rendered) -> dict[str, str | None]:
    return {n["metadata"]["name"]: (n["metadata"].get("annotations") or {}).get(ENABLED) for n in rendered.nodes}


@pytest.mark.parametrize(
    ("clusterpolicy", "auto_upgrade", "annotated"),
    [
        (True, None, False),  # docs/deploy/gpu-operator-values.yaml as shipped: autoUpgrade false
        (True, True, True),
        (False, None, True),  # an NVIDIADriver without spec.upgradePolicy: true by default
        (False, False, False),  # docs/deploy/nvidiadriver.yaml as shipped states false
    ],
    ids=["values-as-shipped", "values-autoUpgrade-true", "nvidiadriver-policy-left-out", "nvidiadriver-as-shipped"],
)
def test_the_driver_daemonset_is_on_delete_and_the_node_says_whether_the_controller_owns_it(
    tmp_path: Path, clusterpolicy: bool, auto_upgrade: bool | None, annotated: bool
) -> None:
    require_renderer()
    if clusterpolicy and auto_upgrade is None:
        assert _values(None)["driver"]["upgradePolicy"]["autoUpgrade"] is False
    if not clusterpolicy and auto_upgrade is False:
        assert _nvidiadriver(False)["spec"]["upgradePolicy"]["autoUpgrade"] is False
    rendered = _render(tmp_path, clusterpolicy=clusterpolicy, auto_upgrade=auto_upgrade)
    assert rendered.daemonsets  # one (ClusterPolicy) or one per Talos release (NVIDIADriver)
    for ds in rendered.daemonsets:
        assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}, ds["metadata"]["name"]
        # the label the upgrade controller lists driver pods by, on either path
        assert ds["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "nvidia-driver"
    assert _annotations(rendered) == dict.fromkeys(("gpu-a", "gpu-b"), "true" if annotated else None)
    # the state label is the upgrade controller's alone; rendering never sets it
    assert all(STATE not in n["metadata"]["labels"] for n in rendered.nodes)


def test_the_values_ask_for_on_delete_and_the_driver_stays_on_delete_under_rolling_update(tmp_path: Path) -> None:
    """``daemonsets.updateStrategy: RollingUpdate`` (the chart default) never reaches the driver DaemonSet."""
    require_renderer()
    values = _values(None)
    values.setdefault("daemonsets", {})["updateStrategy"] = "RollingUpdate"
    values["daemonsets"]["rollingUpdate"] = {"maxUnavailable": "1"}
    (ds,) = render(
        nodes=[talos_node("gpu-a")], clusterpolicy=clusterpolicy_from_values(values), tmp=tmp_path
    ).daemonsets
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_the_upgrades_page_names_the_state_machine_and_the_way_out_of_upgrade_failed() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for fact in (
        "OnDelete",
        ENABLED,
        STATE,
        "upgrade-failed",
        "`maxParallelUpgrades`",
        "`maxUnavailable`",
        "more than 10 restarts",
        "kubectl uncordon <node>",
        f"{STATE}=upgrade-done",
        "nvidia.com/gpu-driver-upgrade.skip=true",
        "kubectl delete pod -n <ns> <pod>",
        "tests/integration/test_operator_autoupgrade.py",
    ):
        assert fact in text, fact
    # the old promise that the controller restarts pods safely on Talos is gone
    assert "lets the operator's upgrade controller cordon" not in text
    assert "Delete the driver pod on each node" not in text
