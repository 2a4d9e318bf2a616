"""The kubeconfig YAML subset reader, checked against PyYAML where it is installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import require_module

from driver_container.errors import KubernetesError
from driver_container.manager.kubeconfig import parse_yaml_subset, select_context

# As written by talosctl kubeconfig (sequences indented under their key) ...
TALOSCTL = """\
apiVersion: v1
kind: Config
clusters:
    - name: prod
      cluster:
        server: https://10.5.0.2:6443
        certificate-authority-data: TFMwdExTMUNSVWRKVGlCRFJWSlVTVVpKUTBGVVJTMHRMUzB0Q2c9PQ==
contexts:
    - context:
        cluster: prod
        namespace: default
        user: admin@prod
      name: admin@prod
current-context: admin@prod
users:
    - name: admin@prod
      user:
        client-certificate-data: Y2VydA==
        client-key-data: a2V5
"""
# ... and by kubectl (sequences at the key's indentation), with comments, quotes and a token.
KUBECTL = """\
# written by kubectl
apiVersion: v1
clusters:
- cluster:
    insecure-skip-tls-verify: true   # lab only
    server: "https://[fd00::1]:6443"
  name: 'lab'
contexts:
- context: {cluster: lab, user: sa}
  name: lab
- context:
    cluster: lab
    user: sa
  name: "it's"
current-context: "it's"
kind: Config
preferences: {}
users:
- name: sa
  user:
    token: abc#notacomment
"""


def test_talosctl_layout() -> None:
    doc = parse_yaml_subset(TALOSCTL)
    assert isinstance(doc, dict)
    entry = select_context(doc, Path("/cfg/config"))
    assert entry.server == "https://10.5.0.2:6443" and entry.context == "admin@prod"
    assert (entry.client_cert_data, entry.client_key_data) == ("Y2VydA==", "a2V5")
    assert "a2V5" not in repr(entry)


def test_flow_mapping_with_content_is_refused_with_its_line() -> None:
    with pytest.raises(KubernetesError, match=r"<kubeconfig>: line 9: flow collection") as caught:
        parse_yaml_subset(KUBECTL)
    assert caught.value.fix is not None and "-o json" in caught.value.fix


def test_kubectl_layout_quotes_comments_and_token() -> None:
    doc = parse_yaml_subset(KUBECTL.replace("- context: {cluster: lab, user: sa}\n  name: lab\n", ""))
    assert isinstance(doc, dict)
    entry = select_context(doc, Path("/cfg/config"))
    assert entry.server == "https://[fd00::1]:6443" and entry.insecure and entry.token == "abc#notacomment"
    assert entry.context == "it's"


def test_json_kubeconfig_and_relative_files(tmp_path: Path) -> None:
    doc = {
        "clusters": [{"name": "c", "cluster": {"server": "https://h:6443/", "certificate-authority": "ca.pem"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"tokenFile": "tok"}}],
        "current-context": "x",
    }
    parsed = parse_yaml_subset(json.dumps(doc))
    assert isinstance(parsed, dict)
    entry = select_context(parsed, tmp_path / "config")
    assert (
        entry.server == "https://h:6443"
        and entry.ca_file == tmp_path / "ca.pem"
        and entry.token_file == tmp_path / "tok"
    )


@pytest.mark.parametrize(
    ("text", "what"),
    [("a: &x 1\n", "line 1: unsupported YAML construct '&x 1'"),
     ("a: |\n  x\n", "line 1: unsupported YAML construct '|'"),
     ("a: 1\na: 2\n", "line 2: duplicate key 'a'"), ("a:\n\tb: 1\n", "line 2: tab in indentation")],
)  # fmt: skip
def test_unsupported_yaml_is_refused_naming_the_line(text: str, what: str) -> None:
    with pytest.raises(KubernetesError) as caught:
        parse_yaml_subset(text)
    assert caught.value.message == f"<kubeconfig>: {what}"


def test_exec_users_are_refused() -> None:
    doc = parse_yaml_subset(TALOSCTL.replace("client-certificate-data: Y2VydA==", "exec:\n          command: x"))
    assert isinstance(doc, dict)
    with pytest.raises(KubernetesError, match="uses 'exec'"):
        select_context(doc, Path("/cfg/config"))


yaml = require_module("yaml")  # PyYAML: the oracle (test extra); the reader itself never needs it


class _IndentedSequences(yaml.SafeDumper):  # type: ignore[name-defined,misc]
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


_key = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)
_scalar = st.one_of(
    st.from_regex(r"[A-Za-z/][A-Za-z0-9./:@_=+-]{0,20}", fullmatch=True),
    st.integers(-1000, 1000),
    st.booleans(),
    st.text(st.characters(codec="ascii", exclude_categories=("Cc",)), max_size=12),
)
_tree = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3), st.dictionaries(_key, inner, min_size=1, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(doc=st.dictionaries(_key, _tree, min_size=1, max_size=4), indent=st.sampled_from([2, 4]))
def test_agrees_with_pyyaml_on_block_documents(doc: dict[str, object], indent: int) -> None:
    for dumper in (yaml.SafeDumper, _IndentedSequences):  # kubectl's and talosctl's sequence layouts
        text = yaml.dump(doc, Dumper=dumper, default_flow_style=False, indent=indent, sort_keys=False)
        assert parse_yaml_subset(text) == yaml.safe_load(text)


def test_token_files_that_are_fifos_or_devices_are_refused_not_read(tmp_path: Path) -> None:
    """A tokenFile (or kubeconfig) that is /dev/zero or a FIFO must neither exhaust memory nor hang."""
    import os

    from driver_container.manager.secretfile import read_small_file

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (Path("/dev/zero"), fifo):
        with pytest.raises(KubernetesError, match="not a regular file"):
            read_small_file(path, "tokenFile")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 100)
    with pytest.raises(KubernetesError, match="larger than 10 bytes"):
        read_small_file(big, "tokenFile", limit=10)
