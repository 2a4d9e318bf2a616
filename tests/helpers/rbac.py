"""A small RBAC authorizer for the loopback API stand-in (``ApiState.authorize`` of tests/helpers/apiserver.py).

It decides as Kubernetes' RBAC authorizer does for the requests this project makes, from Role, ClusterRole,
RoleBinding and ClusterRoleBinding objects (manifests as applied): a RoleBinding grants the rules of its
Role (same namespace) or ClusterRole inside its own namespace, a ClusterRoleBinding grants a ClusterRole's
rules everywhere (kubernetes/kubernetes v1.34 ``pkg/registry/rbac/validation/rule.go``
``VisitRulesFor``/``appliesToUser``; rule matching ``pkg/apis/rbac/v1/evaluation_helpers.go``
``VerbMatches``, ``APIGroupMatches``, ``ResourceMatches`` (``resource/subresource``), ``ResourceNameMatches``).
A service account's user is ``system:serviceaccount:<ns>:<name>`` in the groups ``system:serviceaccounts``
and ``system:serviceaccounts:<ns>`` (k8s.io/apiserver ``pkg/authentication/serviceaccount/util.go``
``MakeUsername``, ``MakeGroupNames``), plus ``system:authenticated``. Nothing is aggregated, and there
are no non-resource URLs: what is not granted is denied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SA_PREFIX = "system:serviceaccount:"
RBAC_KINDS = frozenset({"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"})
VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


@dataclass(frozen=True)
class Attributes:
    """What RBAC reads of one resource request."""

    verb: str
    api_group: str
    namespace: str  # "" for a cluster-scoped resource
    resource: str
    subresource: str
    name: str


def service_account_user(namespace: str, name: str) -> str:
    return f"{SA_PREFIX}{namespace}:{name}"


def groups_of(user: str) -> frozenset[str]:
    """The groups the API server's authenticators give ``user`` (a service account's, or only
    ``system:authenticated``)."""
    groups = {"system:authenticated"}
    if user.startswith(SA_PREFIX):
        namespace = user.removeprefix(SA_PREFIX).split(":", 1)[0]
        groups |= {"system:serviceaccounts", f"system:serviceaccounts:{namespace}"}
    return frozenset(groups)


def attributes(method: str, path: str) -> Attributes:
    """``/api/v1/[namespaces/<ns>/]<resource>[/<name>[/<subresource>]]`` or the same under
    ``/apis/<group>/<version>``; a GET without a name is a ``list``."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"]:
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"not a resource path: {path}")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource, name, subresource = [*rest, "", "", ""][:3]
    verb = VERBS.get(method) or ("get" if name else "list")
    return Attributes(verb, group, namespace, resource, subresource, name)


def _rule_allows(rule: Mapping[str, Any], a: Attributes) -> bool:
    verbs, groups = rule.get("verbs") or [], rule.get("apiGroups") or []
    resources, names = rule.get("resources") or [], rule.get("resourceNames") or []
    wanted = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
    return (
        ("*" in verbs or a.verb in verbs)
        and ("*" in groups or a.api_group in groups)
        and ("*" in resources or wanted in resources)
        and (not names or a.name in names)
    )


def _subject_applies(subject: Mapping[str, Any], user: str, binding_namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "ServiceAccount":
        return user == service_account_user(subject.get("namespace") or binding_namespace, str(name))
    if kind == "User":
        return user == name
    return kind == "Group" and name in groups_of(user)


class Authorizer:
    """``authorize(user, method, path)`` over the RBAC objects among ``objects`` (others are ignored)."""

    def __init__(self, objects: Iterable[Mapping[str, Any]]) -> None:
        kept = [o for o in objects if o.get("kind") in RBAC_KINDS]
        self.roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in kept}
        self.bindings = [o for o in kept if o["kind"].endswith("Binding")]

    def _rules(self, binding: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
        role = self.roles.get((ref["kind"], namespace, ref["name"]))
        return list(role.get("rules") or []) if role else []  # a missing role grants nothing

    def __call__(self, user: str, method: str, path: str) -> bool:
        a = attributes(method, path)
        for binding in self.bindings:
            namespace = binding["metadata"].get("namespace", "")
            if binding["kind"] == "RoleBinding" and namespace != a.namespace:
                continue  # a RoleBinding grants inside its namespace only, never cluster-scoped resources
            if not any(_subject_applies(s, user, namespace) for s in binding.get("subjects") or []):
                continue
            if any(_rule_allows(rule, a) for rule in self._rules(binding)):
                return True
        return False
