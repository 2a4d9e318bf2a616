"""A kubeconfig reader: PyYAML's safe loader, bounded, strict where kubectl is.

KUBECONFIG only serves running ``driver-manager`` from a workstation or a debugging pod; the production
path (the in-cluster service account, ``endpoint.in_cluster_endpoint``) reads no kubeconfig, and
``endpoint`` imports this module (and so PyYAML) only for a kubeconfig. Real kubeconfigs use all of YAML
that ``kubectl`` accepts (flow collections, anchors, block scalars, JSON), so a real YAML parser reads
them: ``yaml.safe_load``'s constructors (no tags beyond YAML's own), with libyaml's C scanner where it
is built in. Two rules are kubectl's rather than PyYAML's: a duplicate key is an error (sigs.k8s.io/yaml
decodes through go-yaml, which refuses "mapping key already defined"), and an integer longer than
``numbers.MAX_DIGITS`` stays text (Python refuses to convert more than 4300 digits, and no kubeconfig
field is such a number). The file itself is read by ``secretfile.read_small_file`` (non-blocking,
regular file, bounded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from driver_container.base.errors import KubernetesError
from driver_container.formats.numbers import MAX_DIGITS
from driver_container.kube.secretfile import read_small_file

_FIX = "check the file with: kubectl config view --kubeconfig FILE"
YamlValue = object
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's scanner where PyYAML has it


class _KubeconfigLoader(_BaseLoader):  # type: ignore[misc]
    """``yaml.safe_load``'s loader with kubectl's duplicate-key rule and bounded integers."""


def _mapping(loader: Any, node: yaml.MappingNode) -> dict[object, object]:
    own = sum(key.tag != "tag:yaml.org,2002:merge" for key, _value in node.value)
    loader.flatten_mapping(node)  # merged pairs (<<: *anchor) first, then the mapping's own, as SafeConstructor
    first_own = len(node.value) - own
    result: dict[object, object] = {}
    seen: set[object] = set()  # the mapping's own keys: a merged key may be overridden, an own one not twice
    for index, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = index >= first_own and key in seen
        except TypeError as exc:  # an unhashable key (a mapping or a list used as a key)
            raise yaml.constructor.ConstructorError(None, None, "unhashable key", key_node.start_mark) from exc
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        if index >= first_own:
            seen.add(key)
        result[key] = loader.construct_object(value_node, deep=True)
    return result


def _integer(loader: Any, node: yaml.ScalarNode) -> object:
    text = loader.construct_scalar(node)
    digits = sum(ch.isdigit() for ch in text)
    return text if digits > MAX_DIGITS else loader.construct_yaml_int(node)


_KubeconfigLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_KubeconfigLoader.add_constructor("tag:yaml.org,2002:int", _integer)


def parse_kubeconfig(text: str, *, source: str = "<kubeconfig>") -> YamlValue:
    """Parse kubeconfig text (YAML, or JSON, which is YAML); raises KubernetesError naming the line."""
    try:
        return yaml.load(text, Loader=_KubeconfigLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise KubernetesError(f"{source}: {where}{exc.problem or exc.context}", path=source, fix=_FIX) from exc
    except (yaml.YAMLError, RecursionError, ValueError) as exc:  # RecursionError: nesting thousands deep
        raise KubernetesError(f"{source}: not YAML: {type(exc).__name__}", path=source, fix=_FIX) from exc


def load_kubeconfig_file(path: Path) -> dict[str, YamlValue]:
    text = read_small_file(path, "kubeconfig", fix="check KUBECONFIG")
    value = parse_kubeconfig(text, source=str(path))
    if not isinstance(value, dict):
        raise KubernetesError(
            f"{path}: not a kubeconfig (top level is not a mapping)",
            path=path,
            fix="check KUBECONFIG",
        )
    return value


@dataclass(frozen=True)
class KubeconfigEntry:
    """What one context of a kubeconfig says about reaching the API server. Secrets stay out of repr."""

    source: Path
    context: str
    server: str
    ca_file: Path | None = None
    ca_data: str | None = None  # base64 PEM, as in the file
    insecure: bool = False
    token: str | None = field(default=None, repr=False)
    token_file: Path | None = None
    client_cert_file: Path | None = None
    client_cert_data: str | None = None
    client_key_file: Path | None = None
    client_key_data: str | None = field(default=None, repr=False)


def _named(doc: dict[str, YamlValue], section: str, name: str, source: Path) -> dict[str, YamlValue]:
    entries = doc.get(section) or []
    if isinstance(entries, list):
        for entry in entries:
            if isinstance(entry, dict) and entry.get("name") == name:
                body = entry.get(section[:-1]) or {}
                if isinstance(body, dict):
                    return body
    raise KubernetesError(
        f"{source}: no {section[:-1]} named {name!r}",
        path=source,
        fix="check the kubeconfig's contexts",
    )


def _text(body: dict[str, YamlValue], key: str) -> str | None:
    value = body.get(key)
    return None if value is None else str(value)


def _path(body: dict[str, YamlValue], key: str, base: Path) -> Path | None:
    value = _text(body, key)
    # kubectl resolves relative file references against the kubeconfig's own directory.
    return None if value is None else base / value


def select_context(doc: dict[str, YamlValue], source: Path, context: str | None = None) -> KubeconfigEntry:
    """The cluster and user of ``context`` (default: current-context)."""
    name = context or _text(doc, "current-context")
    if not name:
        raise KubernetesError(f"{source}: no current-context", path=source, fix="kubectl config use-context NAME")
    ctx = _named(doc, "contexts", name, source)
    cluster = _named(doc, "clusters", str(ctx.get("cluster")), source)
    user = _named(doc, "users", str(ctx.get("user")), source) if ctx.get("user") else {}
    for unsupported in ("exec", "auth-provider", "username"):
        if unsupported in user:
            raise KubernetesError(
                f"{source}: user of context {name!r} uses {unsupported!r}, which driver-manager does not support",
                path=source,
                fix="use a token or client-certificate user (e.g. a service-account token)",
            )
    server = _text(cluster, "server")
    if not server:
        raise KubernetesError(
            f"{source}: cluster of context {name!r} has no server", path=source, fix="set clusters[].cluster.server"
        )
    base = source.parent
    return KubeconfigEntry(
        source=source,
        context=name,
        server=server.rstrip("/"),
        ca_file=_path(cluster, "certificate-authority", base),
        ca_data=_text(cluster, "certificate-authority-data"),
        # Any value but absent/false counts (a quoted "true" must not slip past the refusal in kube/endpoint.py).
        insecure=cluster.get("insecure-skip-tls-verify") not in (None, False, "false"),
        token=_text(user, "token"),
        token_file=_path(user, "tokenFile", base),
        client_cert_file=_path(user, "client-certificate", base),
        client_cert_data=_text(user, "client-certificate-data"),
        client_key_file=_path(user, "client-key", base),
        client_key_data=_text(user, "client-key-data"),
    )
