"""Every docs/deploy manifest validates against the schema it targets, and a broken one does not.

Schemas: tests/fixtures/schemas (README.md names repository, path and commit of each); how each kind is
checked: tests/helpers/schemas.py. The helm values are checked as the ClusterPolicy the chart renders from
them (deployments/gpu-operator/templates/clusterpolicy.yaml at NVIDIA/gpu-operator a22dbf67).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest
from helpers.schemas import (
    custom_resource_errors,
    custom_resource_section_errors,
    kubernetes_errors,
    structural_to_json_schema,
    talos_errors,
)
from helpers.support import REPO, ROUTE_AND_REFERENCE_PAGES, require_module

yaml = require_module("yaml")
require_module("jsonschema")

DEPLOY = REPO / "docs" / "deploy"
NVIDIADRIVER_CRD = "nvidia.com_nvidiadrivers.schema.json"
CLUSTERPOLICY_CRD = "nvidia.com_clusterpolicies.schema.json"
# The Talos release whose machine-config schema each patch is written for (its header says which).
TALOS_PATCHES = {
    "talos-machine-config.yaml": "v1.13.9",  # machine.kernel.modules: before 1.14 (1.14's schema omits it)
    "talos-nri-1.13.yaml": "v1.13.9",
    "talos-kernel-module-config.yaml": "v1.14.0-rc.1",
    "talos-nri-1.14.yaml": "v1.14.0-rc.1",
}
KUBERNETES_MANIFESTS = {"standalone-daemonset.yaml", "driver-events-rbac.yaml"}
CUSTOM_RESOURCES = {"nvidiadriver.yaml": NVIDIADRIVER_CRD}
HELM_VALUES = {"gpu-operator-values.yaml"}
# The chart's own defaults for what the template renders unconditionally (deployments/gpu-operator/
# values.yaml at a22dbf67): helm merges the values file over them.
CHART_DEFAULTS: dict[str, Any] = {
    "driver": {
        "enabled": True,
        "nvidiaDriverCRD": {"enabled": False},
        "usePrecompiled": False,
        "rdma": {"enabled": False, "useHostMofed": False},
        "upgradePolicy": {
            "autoUpgrade": True,
            "maxParallelUpgrades": 1,
            "maxUnavailable": "25%",
            "waitForCompletion": {"timeoutSeconds": 0, "podSelector": ""},
            "gpuPodDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
            "drain": {
                "enable": False,
                "force": False,
                "podSelector": "",
                "timeoutSeconds": 300,
                "deleteEmptyDir": False,
            },
        },
    },
    "toolkit": {"enabled": True},
    "cdi": {"enabled": True, "nriPluginEnabled": False},
    "psa": {"enabled": False},
    "hostPaths": {"rootFS": "/", "driverInstallDir": "/run/nvidia/driver"},
}


def _merged(defaults: Any, values: Any) -> Any:
    if isinstance(defaults, dict) and isinstance(values, dict):
        return {k: _merged(defaults.get(k), values.get(k)) if k in values else defaults[k] for k in defaults | values}
    return copy.deepcopy(values)


def render_cluster_policy(values: dict[str, Any]) -> dict[str, Any]:
    """The spec sections templates/clusterpolicy.yaml renders from the keys these values use."""
    v = _merged(CHART_DEFAULTS, values)
    d, up = v["driver"], v["driver"]["upgradePolicy"]
    driver: dict[str, Any] = {"enabled": d["enabled"], "useNvidiaDriverCRD": d["nvidiaDriverCRD"]["enabled"]}
    if not d["nvidiaDriverCRD"]["enabled"]:
        driver |= {
            k: d[k]
            for k in (
                "kernelModuleType",
                "usePrecompiled",
                "repository",
                "image",
                "version",
                "startupProbe",
                "rdma",
                "manager",
                "env",
            )
            if k in d
        }
    driver["upgradePolicy"] = {
        "autoUpgrade": up["autoUpgrade"],
        "maxParallelUpgrades": up["maxParallelUpgrades"],
        "maxUnavailable": up["maxUnavailable"],
        "waitForCompletion": {"timeoutSeconds": up["waitForCompletion"]["timeoutSeconds"]},
        "podDeletion": up["gpuPodDeletion"],
        "drain": {k: v for k, v in up["drain"].items() if k != "podSelector"},
    }
    cdi = {"enabled": v["cdi"]["enabled"]}
    if v["cdi"]["enabled"] and v["cdi"]["nriPluginEnabled"]:
        cdi["nriPluginEnabled"] = v["cdi"]["nriPluginEnabled"]
    toolkit = {k: v["toolkit"][k] for k in ("enabled", "env", "installDir") if k in v["toolkit"]}
    return {"hostPaths": v["hostPaths"], "psa": v["psa"], "cdi": cdi, "driver": driver, "toolkit": toolkit}


def _docs(name: str) -> list[Any]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d is not None]


def _values_errors(values: dict[str, Any]) -> list[str]:
    rendered = render_cluster_policy(values)
    return [
        e
        for section, value in rendered.items()
        for e in custom_resource_section_errors(CLUSTERPOLICY_CRD, "v1", section, value)
    ]


def _doc_snippets() -> list[Any]:
    """The Kubernetes objects the walk-throughs tell users to apply."""
    docs: list[Any] = []
    for md in ROUTE_AND_REFERENCE_PAGES:
        for block in re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / md).read_text(), re.S):
            docs += [d for d in yaml.safe_load_all(block) if isinstance(d, dict) and "apiVersion" in d]
    return docs


def test_every_deploy_file_has_a_schema_check() -> None:
    covered = set(TALOS_PATCHES) | KUBERNETES_MANIFESTS | set(CUSTOM_RESOURCES) | HELM_VALUES
    assert {p.name for p in DEPLOY.glob("*.yaml")} == covered


@pytest.mark.parametrize("name", sorted(TALOS_PATCHES))
def test_talos_patch_is_valid_for_its_release(name: str) -> None:
    assert talos_errors((DEPLOY / name).read_text(), TALOS_PATCHES[name]) == []


@pytest.mark.parametrize("name", sorted(KUBERNETES_MANIFESTS))
def test_kubernetes_manifest_validates_strictly(name: str) -> None:
    errors = [e for doc in _docs(name) for e in kubernetes_errors(doc)]
    assert errors == []


def test_doc_snippets_validate_strictly() -> None:
    snippets = _doc_snippets()
    # RBAC lives in docs/deploy/driver-events-rbac.yaml (validated above), never as a copy in a page.
    assert not {d["kind"] for d in snippets} & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    assert [e for doc in snippets for e in kubernetes_errors(doc)] == []


@pytest.mark.parametrize("name", sorted(CUSTOM_RESOURCES))
def test_custom_resource_validates_against_its_crd(name: str) -> None:
    errors = [e for doc in _docs(name) for e in custom_resource_errors(CUSTOM_RESOURCES[name], doc)]
    assert errors == []


def test_helm_values_render_a_valid_cluster_policy() -> None:
    (values,) = _docs("gpu-operator-values.yaml")
    rendered = render_cluster_policy(values)
    assert rendered["driver"]["upgradePolicy"]["autoUpgrade"] is False  # the values' choice survives the render
    assert rendered["toolkit"]["installDir"] == "/var/nvidia/toolkit"
    assert _values_errors(values) == []


# -- the checks reject what the real tools reject ----------------------------------------------------
Breaker = Callable[[Any], None]


def _set(path: str, value: object) -> Breaker:
    def apply(doc: Any) -> None:
        *parents, last = path.split(".")
        for key in parents:
            doc = doc[int(key)] if isinstance(doc, list) else doc[key]
        doc[last] = value

    return apply


@pytest.mark.parametrize(
    ("kind", "breaker"),
    [
        ("DaemonSet", _set("spec.template.spec.hostPid", True)),  # a typo: unknown field
        ("DaemonSet", _set("spec.template.spec.containers.0.securityContext.privileged", "true")),
        ("DaemonSet", _set("spec.updateStrategy.type", 1)),
        ("ConfigMap", _set("data", ["not", "a", "map"])),
        ("ClusterRoleBinding", _set("roleRef.name", None)),
    ],
)
def test_a_broken_kubernetes_manifest_is_rejected(kind: str, breaker: Breaker) -> None:
    doc = copy.deepcopy(next(d for d in _docs("standalone-daemonset.yaml") if d["kind"] == kind))
    assert kubernetes_errors(doc) == []
    breaker(doc)
    assert kubernetes_errors(doc) != []


@pytest.mark.parametrize(
    "breaker",
    [
        _set("spec.upgradePolicy.autoUpgrade", "false"),  # a string, not a boolean
        _set("spec.driverVersion", "595.91.07"),  # not a field of the CRD
        _set("spec.startupProbe.timeoutSeconds", "60s"),
        _set("spec.kernelModuleType", "closed"),  # enum: auto, open, proprietary
        _set("metadata.labelz", {}),  # ObjectMeta is checked too
    ],
)
def test_a_broken_nvidiadriver_is_rejected(breaker: Breaker) -> None:
    (doc,) = copy.deepcopy(_docs("nvidiadriver.yaml"))
    breaker(doc)
    assert custom_resource_errors(NVIDIADRIVER_CRD, doc) != []


@pytest.mark.parametrize(
    "breaker",
    [
        # A key the chart does not know is dropped by the template, not rendered: the key list of
        # test_manifests.py (test_values_use_only_keys_of_the_chart) catches those.
        _set("toolkit.installDir", ["/var/nvidia/toolkit"]),
        _set("cdi.nriPluginEnabled", 1),
        _set("driver.startupProbe.periodSeconds", "10"),
        _set("psa.enabled", "true"),
    ],
)
def test_broken_helm_values_render_an_invalid_cluster_policy(breaker: Breaker) -> None:
    (values,) = copy.deepcopy(_docs("gpu-operator-values.yaml"))
    breaker(values)
    assert _values_errors(values) != []


@pytest.mark.parametrize(
    ("name", "old", "new"),
    [
        ("talos-machine-config.yaml", "  - name: nvidia_modeset", "  - name: nvidia_modeset\n        parameters:"),
        ("talos-machine-config.yaml", "    modules:", "    module:"),  # unknown key
        ("talos-machine-config.yaml", "machine:", "apiVersion: v1alpha1\nkind: KernelConfig\nmachine:"),
        ("talos-kernel-module-config.yaml", "name: nvidia_uvm", "name: nvidia_uvm\nparameters:"),  # null
        ("talos-kernel-module-config.yaml", "name: nvidia_uvm", "name: nvidia_modeset"),  # duplicate document
        ("talos-kernel-module-config.yaml", "name: nvidia_uvm", "name: nvidia_uvm\nload: true"),
        ("talos-kernel-module-config.yaml", "kind: KernelModuleConfig\nname: nvidia_uvm", "kind: KernelModuleConfig"),
        ("talos-nri-1.13.yaml", "      op: create", "      op: create\n      mode: 0644"),
        ("talos-nri-1.14.yaml", "name: nvidia-nri", "name: customization"),  # reserved name
        ("talos-nri-1.14.yaml", "name: nvidia-nri", "name: nvidia nri"),
        ("talos-nri-1.14.yaml", "content: |", "contents: |"),
    ],
)
def test_a_broken_talos_patch_is_rejected(name: str, old: str, new: str) -> None:
    text = (DEPLOY / name).read_text()
    assert old in text
    assert talos_errors(text.replace(old, new, 1), TALOS_PATCHES[name]) != []


def test_legacy_module_list_is_not_in_the_talos_114_schema() -> None:
    # 1.14's JSON schema leaves out deprecated v1alpha1 fields: the legacy patch is checked against 1.13's.
    assert talos_errors((DEPLOY / "talos-machine-config.yaml").read_text(), "v1.14.0-rc.1") != []


def test_structural_schema_reading() -> None:
    schema = structural_to_json_schema(
        {
            "type": "object",
            "required": ["kind", "size"],
            "properties": {
                "kind": {"type": "string", "default": "gpu"},
                "size": {"type": "integer"},
                "port": {"x-kubernetes-int-or-string": True},
                "name": {"type": "string", "nullable": True},
                "free": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"a": {"type": "string"}},
                },
                "map": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }
    )
    from jsonschema import Draft202012Validator

    ok = Draft202012Validator(schema)
    assert ok.is_valid({"size": 1, "port": 1, "name": None, "free": {"b": 1}, "map": {"k": "v"}})
    assert ok.is_valid({"size": 1, "port": "25%"})  # kind: defaulted by the API server
    assert not ok.is_valid({"port": 1})  # size: required, no default
    assert not ok.is_valid({"size": 1, "port": 1.5})
    assert not ok.is_valid({"size": 1, "unknown": 1})
    assert not ok.is_valid({"size": 1, "map": {"k": 1}})
