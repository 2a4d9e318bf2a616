"""A kubeconfig reader for the subset of YAML that kubeconfig files use.

Why not PyYAML: the production path (in-cluster service account) needs no YAML at all; KUBECONFIG only
serves running ``driver-manager`` from a workstation or a debugging pod. Files written by ``kubectl``,
``talosctl kubeconfig`` and cloud CLIs use block mappings, block sequences (``- name: x``, indented or
not under their key), plain and quoted scalars, comments, and empty ``{}``/``[]``. That subset is
parsed here (tested against PyYAML as an oracle); anything else (anchors, tags, block scalars, flow
collections with content) is refused with the exact line and a fix, and JSON (``kubectl config view
--flatten -o json``) is always accepted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from driver_container.errors import KubernetesError
from driver_container.formats.numbers import parse_int
from driver_container.manager.secretfile import read_small_file

_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
_FIX = "flatten it to JSON: kubectl config view --flatten -o json > kubeconfig.json"
YamlValue = object


@dataclass(frozen=True)
class _Line:
    number: int  # 1-based, for messages
    indent: int
    text: str  # without indentation and trailing comment


def _strip_comment(text: str) -> str:
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"" and (i == 0 or text[i - 1] in " :-[{,"):
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.rstrip()


def _lines(text: str) -> list[_Line]:
    out: list[_Line] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise _error(number, "tab in indentation")
        body = _strip_comment(raw.strip())
        if not body or body in ("---", "..."):
            continue
        out.append(_Line(number, len(raw) - len(raw.lstrip(" ")), body))
    return out


class _Unsupported(Exception):
    def __init__(self, number: int, what: str) -> None:
        super().__init__(f"line {number}: {what}")


def _error(number: int, what: str) -> _Unsupported:
    return _Unsupported(number, what)


def _scalar(text: str, number: int) -> YamlValue:
    # "?" starts a complex key only when a space follows; "?0" is a plain scalar (YAML 1.1 ns-plain-first).
    if text[0] in "&*!|>%@`" or text == "?" or text.startswith("? "):
        raise _error(number, f"unsupported YAML construct {text[:20]!r}")
    if text.startswith('"'):
        try:
            return json.loads(text)  # YAML double-quoted escapes used in kubeconfigs are JSON's
        except json.JSONDecodeError as exc:
            raise _error(number, f"bad double-quoted string {text[:40]!r}") from exc
    if text.startswith("'"):
        if len(text) < 2 or not text.endswith("'"):
            raise _error(number, f"bad single-quoted string {text[:40]!r}")
        return text[1:-1].replace("''", "'")
    if text in ("{}", "[]"):
        return {} if text == "{}" else []
    if text[0] in "[{":
        raise _error(number, f"flow collection {text[:40]!r}")
    if text in ("true", "True", "TRUE", "false", "False", "FALSE"):
        return text.lower() == "true"
    if text in ("null", "Null", "NULL", "~"):
        return None
    if _INT.fullmatch(text) and (integer := parse_int(text)) is not None:
        return integer  # longer digit strings stay text (a YAML int of 5000 digits is nobody's config)
    return text


def _split_key(text: str, number: int) -> tuple[str, str] | None:
    """``key: rest`` -> (key, rest); None when the line is not a mapping entry."""
    if text[0] in "'\"":
        end = text.find(text[0], 1)
        if end < 0 or not text[end + 1 :].startswith(":"):
            return None
        key = str(_scalar(text[: end + 1], number))
        return key, text[end + 2 :].strip()
    match = re.match(r"([^:#]+?):(\s+|$)", text)
    if match is None:
        return None
    return match.group(1), text[match.end() :].strip()


class _Parser:
    def __init__(self, lines: list[_Line]) -> None:
        self.lines = lines
        self.pos = 0

    def block(self, indent: int) -> YamlValue:
        line = self.lines[self.pos]
        if line.text == "-" or line.text.startswith("- "):
            return self.sequence(line.indent)
        if _split_key(line.text, line.number) is None:
            self.pos += 1
            return _scalar(line.text, line.number)
        return self.mapping(line.indent)

    def nested(self, parent_indent: int, number: int, *, allow_same: bool) -> YamlValue:
        if self.pos >= len(self.lines):
            return None
        nxt = self.lines[self.pos]
        is_seq = nxt.text == "-" or nxt.text.startswith("- ")
        if nxt.indent > parent_indent or (allow_same and is_seq and nxt.indent == parent_indent):
            return self.block(nxt.indent)
        return None

    def mapping(self, indent: int) -> dict[str, YamlValue]:
        result: dict[str, YamlValue] = {}
        while self.pos < len(self.lines):
            line = self.lines[self.pos]
            if line.indent < indent or (line.indent == indent and (line.text == "-" or line.text.startswith("- "))):
                break
            if line.indent > indent:
                raise _error(line.number, "unexpected indentation")
            split = _split_key(line.text, line.number)
            if split is None:
                raise _error(line.number, f"expected 'key: value', found {line.text[:40]!r}")
            key, rest = split
            if key in result:
                raise _error(line.number, f"duplicate key {key!r}")
            self.pos += 1
            result[key] = _scalar(rest, line.number) if rest else self.nested(indent, line.number, allow_same=True)
        return result

    def sequence(self, indent: int) -> list[YamlValue]:
        result: list[YamlValue] = []
        while self.pos < len(self.lines):
            line = self.lines[self.pos]
            if line.indent != indent or not (line.text == "-" or line.text.startswith("- ")):
                if line.indent > indent:
                    raise _error(line.number, "unexpected indentation")
                break
            rest = line.text[1:].strip()
            if not rest:
                self.pos += 1
                result.append(self.nested(indent, line.number, allow_same=False))
                continue
            # "- key: v" opens a mapping whose keys sit at the column after "- ".
            column = indent + (len(line.text) - len(rest))
            self.lines[self.pos] = _Line(line.number, column, rest)
            result.append(self.block(column))
        return result


def parse_yaml_subset(text: str, *, source: str = "<kubeconfig>") -> YamlValue:
    """Parse kubeconfig-style YAML (or JSON) text; raises KubernetesError naming the line."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise KubernetesError(f"{source}: invalid JSON: {exc}", fix=_FIX) from exc
    try:
        lines = _lines(text)
        if not lines:
            return None
        parser = _Parser(lines)
        value = parser.block(lines[0].indent)
        if parser.pos < len(lines):
            raise _error(lines[parser.pos].number, "unexpected content after the document")
        return value
    except _Unsupported as exc:
        raise KubernetesError(f"{source}: {exc}", fix=_FIX) from exc


def load_kubeconfig_file(path: Path) -> dict[str, YamlValue]:
    text = read_small_file(path, "kubeconfig", fix="check KUBECONFIG")
    value = parse_yaml_subset(text, source=str(path))
    if not isinstance(value, dict):
        raise KubernetesError(f"{path}: not a kubeconfig (top level is not a mapping)", fix="check KUBECONFIG")
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
    raise KubernetesError(f"{source}: no {section[:-1]} named {name!r}", fix="check the kubeconfig's contexts")


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
        raise KubernetesError(f"{source}: no current-context", fix="kubectl config use-context NAME")
    ctx = _named(doc, "contexts", name, source)
    cluster = _named(doc, "clusters", str(ctx.get("cluster")), source)
    user = _named(doc, "users", str(ctx.get("user")), source) if ctx.get("user") else {}
    for unsupported in ("exec", "auth-provider", "username"):
        if unsupported in user:
            raise KubernetesError(
                f"{source}: user of context {name!r} uses {unsupported!r}, which driver-manager does not support",
                fix="use a token or client-certificate user (e.g. a service-account token)",
            )
    server = _text(cluster, "server")
    if not server:
        raise KubernetesError(
            f"{source}: cluster of context {name!r} has no server", fix="set clusters[].cluster.server"
        )
    base = source.parent
    return KubeconfigEntry(
        source=source,
        context=name,
        server=server.rstrip("/"),
        ca_file=_path(cluster, "certificate-authority", base),
        ca_data=_text(cluster, "certificate-authority-data"),
        # Any value but absent/false counts (a quoted "true" must not slip past the refusal in kube.py).
        insecure=cluster.get("insecure-skip-tls-verify") not in (None, False, "false"),
        token=_text(user, "token"),
        token_file=_path(user, "tokenFile", base),
        client_cert_file=_path(user, "client-certificate", base),
        client_cert_data=_text(user, "client-certificate-data"),
        client_key_file=_path(user, "client-key", base),
        client_key_data=_text(user, "client-key-data"),
    )
