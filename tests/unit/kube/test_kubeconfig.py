"""The kubeconfig reader (PyYAML's safe loader with kubectl's duplicate-key rule): real kubeconfig layouts,
the YAML the old hand-written subset refused, and hostile documents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver_container.base.errors import KubernetesError
from driver_container.kube.kubeconfig import parse_kubeconfig, select_context

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
    doc = parse_kubeconfig(TALOSCTL)
    assert isinstance(doc, dict)
    entry = select_context(doc, Path("/cfg/config"))
    assert entry.server == "https://10.5.0.2:6443" and entry.context == "admin@prod"
    assert (entry.client_cert_data, entry.client_key_data) == ("Y2VydA==", "a2V5")
    assert "a2V5" not in repr(entry)


def test_kubectl_layout_flow_mappings_quotes_comments_and_token() -> None:
    doc = parse_kubeconfig(KUBECTL)
    assert isinstance(doc, dict)
    assert doc["contexts"][0] == {"context": {"cluster": "lab", "user": "sa"}, "name": "lab"}
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
    parsed = parse_kubeconfig(json.dumps(doc))
    assert isinstance(parsed, dict)
    entry = select_context(parsed, tmp_path / "config")
    assert (
        entry.server == "https://h:6443"
        and entry.ca_file == tmp_path / "ca.pem"
        and entry.token_file == tmp_path / "tok"
    )


# What real kubeconfigs contain and the old hand-written subset refused: anchors and aliases (shared
# cluster blocks), block scalars (an inline PEM), flow sequences with content, merge keys.
SHARED = """\
clusters:
- name: a
  cluster: &shared
    server: https://a:6443
    certificate-authority-data: >-
      TFMwdExTMUNSVWRK
      VGlCRFJWSlVTVVpK
- name: b
  cluster:
    <<: *shared
    server: https://b:6443
contexts: [{name: b, context: {cluster: b, user: u}}]
current-context: b
users:
- name: u
  user:
    token: |
      abc
"""


def test_anchors_merge_keys_block_scalars_and_flow_sequences() -> None:
    doc = parse_kubeconfig(SHARED)
    assert isinstance(doc, dict)
    entry = select_context(doc, Path("/cfg/config"))
    assert entry.server == "https://b:6443"
    assert entry.ca_data == "TFMwdExTMUNSVWRK VGlCRFJWSlVTVVpK"  # folded, as kubectl reads it
    assert entry.token == "abc\n"


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("a: 1\na: 2\n", "line 2: duplicate key 'a'"),
        ("a:\n\tb: 1\n", "line 2: found character that cannot start any token"),
        ("a: !!python/object:os.system x\n", "line 1: could not determine a constructor for the tag"),
        ("? [1]\n: x\n", "line 1: unhashable key"),
        ("[" * 5000, "line 1: exceeded maximum nesting depth"),
    ],
)
def test_invalid_or_hostile_yaml_is_refused_naming_the_line(text: str, what: str) -> None:
    with pytest.raises(KubernetesError) as caught:
        parse_kubeconfig(text)
    assert caught.value.message.startswith(f"<kubeconfig>: {what}"), caught.value.message
    assert caught.value.path == "<kubeconfig>"
    assert caught.value.fix is not None and "kubectl config view" in caught.value.fix


def test_in_cluster_path_never_imports_yaml(tmp_path: Path) -> None:
    """The service-account endpoint (every driver-manager pod, init's node report) parses no kubeconfig."""
    import subprocess
    import sys

    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("t0k3n")
    (sa / "namespace").write_text("gpu-operator")
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from driver_container.kube.client import KubeClient, KubeConfig\n"
        "from driver_container.settings import Cluster\n"
        "cluster = Cluster.from_env({'KUBERNETES_SERVICE_HOST': '10.96.0.1', 'KUBERNETES_SERVICE_PORT': '443'})\n"
        "c = KubeClient.for_cluster(cluster, "
        f"KubeConfig(service_account_dir=Path({str(sa)!r})))\n"
        "print(c.endpoint.server, 'yaml' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.split() == ["https://10.96.0.1:443", "False"], done.stderr


def test_exec_users_are_refused() -> None:
    doc = parse_kubeconfig(TALOSCTL.replace("client-certificate-data: Y2VydA==", "exec:\n          command: x"))
    assert isinstance(doc, dict)
    with pytest.raises(KubernetesError, match="uses 'exec'"):
        select_context(doc, Path("/cfg/config"))


import yaml  # noqa: E402 - PyYAML, the reader's own parser, writes the documents of the next test


class _IndentedSequences(yaml.SafeDumper):
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
def test_reads_what_pyyaml_writes_in_both_sequence_layouts(doc: dict[str, object], indent: int) -> None:
    for dumper in (yaml.SafeDumper, _IndentedSequences):  # kubectl's and talosctl's sequence layouts
        text = yaml.dump(doc, Dumper=dumper, default_flow_style=False, indent=indent, sort_keys=False)
        assert parse_kubeconfig(text) == yaml.safe_load(text)


def test_token_files_that_are_fifos_or_devices_are_refused_not_read(tmp_path: Path) -> None:
    """A tokenFile (or kubeconfig) that is /dev/zero or a FIFO must neither exhaust memory nor hang."""
    import os

    from driver_container.kube.secretfile import read_small_file

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (Path("/dev/zero"), fifo):
        with pytest.raises(KubernetesError, match="not a regular file"):
            read_small_file(path, "tokenFile")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 100)
    with pytest.raises(KubernetesError, match="larger than 10 bytes"):
        read_small_file(big, "tokenFile", limit=10)
