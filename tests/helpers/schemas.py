"""Manifests checked against the schemas they target, kept in tests/fixtures/schemas (README: sources).

No tool that validates these can run here (kubeconform, talosctl and helm need downloads), so each check
does what the tool does, with the `jsonschema` library on the schema file of the cited commit:

- Kubernetes built-in kinds: the strict (unknown fields rejected) JSON schemas of Kubernetes v1.37, as
  kubeconform -strict / kubernetes-validate --strict use them.
- Custom resources: the CRD's openAPIV3Schema read the way the API server reads a structural schema
  under kubectl's default strict field validation: unknown fields are errors unless
  x-kubernetes-preserve-unknown-fields, x-kubernetes-int-or-string is an integer or a string, nullable
  allows null, a required field with a default is filled in before validation, metadata is an
  ObjectMeta. CEL rules (x-kubernetes-validations) are not evaluated.
- Talos machine-config patches: what `talosctl validate` and `talosctl patch mc` decode with
  (pkg/machinery/config/configloader/internal/decoder/decoder.go at v1.14.0-rc.1): every YAML document
  is a mapping; one with machine/cluster/debug/persist (or version: v1alpha1) is the v1alpha1 config, any
  other needs apiVersion and kind and is decoded as that registered kind; unknown keys are errors
  (KnownFields, CheckUnknownKeys); a document ID (apiVersion, kind, name) appears once. The Go Validate
  rules of the documents used here are added (kernel_module.go, cri/customization.go).
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import yaml
from jsonschema import Draft202012Validator

from helpers.support import FIXTURES

SCHEMAS = FIXTURES / "schemas"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
TALOS_V1ALPHA1_KEYS = {"machine", "cluster", "debug", "persist"}  # decoder.go ManifestDeprecatedKey*
# k8s.io/apimachinery validation.IsQualifiedName without a prefix, as labels.ValidateQualifiedName checks.
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


@cache
def load(name: str) -> Any:
    return json.loads((SCHEMAS / name).read_text())


def _messages(validator: Draft202012Validator, doc: object, where: str) -> list[str]:
    found = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{where}{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in found]


# -- Kubernetes built-in kinds ------------------------------------------------------------------------
def kubernetes_errors(doc: dict[str, Any]) -> list[str]:
    bundle = load("kubernetes-strict.schema.json")
    key = f"{doc.get('apiVersion')}/{doc.get('kind')}"
    if key not in bundle["kinds"]:
        return [f"{key}: no schema kept for this kind (tests/fixtures/schemas/make-schemas.py K8S_KINDS)"]
    schema = {k: v for k, v in bundle["kinds"][key].items() if k != "$id"} | {"$defs": bundle["$defs"]}
    return _messages(Draft202012Validator(schema), doc, f"{key} ")


# -- Custom resources -------------------------------------------------------------------------------
def structural_to_json_schema(node: Any) -> Any:
    """One openAPIV3Schema node (and everything under it) as a JSON Schema with the API server's meaning."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {k: v for k, v in node.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    for key in ("properties", "patternProperties"):
        if key in node:
            out[key] = {name: structural_to_json_schema(sub) for name, sub in node[key].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(node.get(key), dict):
            out[key] = structural_to_json_schema(node[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in node:
            out[key] = [structural_to_json_schema(sub) for sub in node[key]]
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [*out.get("anyOf", []), {"type": "integer"}, {"type": "string"}]
    if (
        node.get("type") == "object"
        and "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False  # pruned by the API server; an error under strict validation
    if "required" in node:  # the API server fills in defaults before it validates
        props = node.get("properties", {})
        out["required"] = [name for name in node["required"] if "default" not in props.get(name, {})]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def custom_resource_schema(crd_file: str, version: str) -> dict[str, Any]:
    crd = load(crd_file)
    schema: dict[str, Any] = structural_to_json_schema(crd["versions"][version])
    schema["properties"]["metadata"] = {"$ref": f"#/$defs/{OBJECT_META}"}
    return schema | {"$defs": load("kubernetes-strict.schema.json")["$defs"]}


def custom_resource_errors(crd_file: str, doc: dict[str, Any]) -> list[str]:
    crd = load(crd_file)
    group, _, version = str(doc.get("apiVersion", "")).partition("/")
    if (group, doc.get("kind")) != (crd["group"], crd["kind"]) or version not in crd["versions"]:
        return [f"{doc.get('apiVersion')}/{doc.get('kind')} is not served by {crd_file}"]
    return _messages(Draft202012Validator(custom_resource_schema(crd_file, version)), doc, f"{crd['kind']} ")


def custom_resource_section_errors(crd_file: str, version: str, section: str, value: object) -> list[str]:
    """One field of a custom resource's spec against its schema (a partial object: a rendered chart)."""
    full = custom_resource_schema(crd_file, version)
    schema = full["properties"]["spec"]["properties"][section] | {"$defs": full["$defs"]}
    return _messages(Draft202012Validator(schema), value, f"spec.{section} ")


# -- Talos machine-config patches -------------------------------------------------------------------
def _talos_definition(defs: dict[str, Any], doc: dict[str, Any]) -> str | None:
    for name, schema in defs.items():
        props = schema.get("properties", {})
        if doc.get("kind") in props.get("kind", {}).get("enum", []) and doc.get("apiVersion") in props.get(
            "apiVersion", {}
        ).get("enum", []):
            return name
    return None


def _talos_go_rules(doc: dict[str, Any]) -> list[str]:
    name = doc.get("name")
    if doc.get("kind") == "KernelModuleConfig" and not name:
        return ["KernelModuleConfig: name is required"]  # runtime/kernel_module.go Validate
    if doc.get("kind") == "CRICustomizationConfig":  # cri/customization.go Validate
        if not isinstance(name, str) or len(name) > 63 or not QUALIFIED_NAME.match(name):
            return [f"CRICustomizationConfig: invalid name {name!r}"]
        if name == "customization":
            return ["CRICustomizationConfig: name 'customization' is reserved for the legacy CRI customization"]
    return []


def talos_errors(text: str, release: str) -> list[str]:
    """Every problem `talosctl` would report decoding `text` as a machine-config patch for `release`."""
    schema = load(f"talos-{release}.schema.json")
    defs: dict[str, Any] = schema["$defs"]
    problems: list[str] = []
    seen: set[tuple[object, object, object]] = set()
    for i, doc in enumerate(d for d in yaml.safe_load_all(text) if d is not None):
        if not isinstance(doc, dict):
            problems.append(f"document {i}: expected a YAML mapping")
            continue
        legacy = bool(TALOS_V1ALPHA1_KEYS & set(doc)) or doc.get("version") == "v1alpha1"
        ident = (doc.get("apiVersion"), doc.get("kind") or "v1alpha1", doc.get("name"))
        if ident in seen:
            problems.append(f"document {i}: duplicate document {ident}")
        seen.add(ident)
        if legacy:
            definition: str | None = "v1alpha1.Config"
        elif not doc.get("kind") or not doc.get("apiVersion"):
            problems.append(f"document {i}: missing {'kind' if not doc.get('kind') else 'apiVersion'}")
            continue
        else:
            definition = _talos_definition(defs, doc)
        if definition is None:
            problems.append(f"document {i}: {doc['apiVersion']}/{doc['kind']} is not a document of Talos {release}")
            continue
        validator = Draft202012Validator({"$defs": defs, "$ref": f"#/$defs/{definition}"})
        problems += _messages(validator, doc, f"document {i} ({definition}) ") + _talos_go_rules(doc)
    return problems
