"""Every command block of docs/quickstart.md runs as far as it can here.

Each fenced block is classified; a block of a kind this file does not know fails the test:

- ``sh``: ``bash -n``; every heredoc it writes is checked by what it is (an Image Factory schematic, a
  Kubernetes object), every ``--patch @docs/deploy/…`` is staged and names a patch that passes the Talos
  schema of the release its section is for, the node reboots once (the upgrade to a ``<platform>-installer``),
  and the ``helm install`` line (values file plus ``--set``s) with the NVIDIADriver the page applies (the shell
  variables of the page filled in) is rendered by gpu-operator v26.7.0's own code
  (tests/helpers/operator_render.py) for a v1.13.9 and a v1.14.0-rc.1 node: each pool's driver container
  pulls the tag of its own release, its manager the digest the page's ``make image`` block took (the
  NVIDIADriver line stops on an empty one);
- ``text``: what a command prints, not run.
"""

from __future__ import annotations

import functools
import itertools
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.operator_render import Rendered, clusterpolicy_from_values, render, talos_node
from helpers.schemas import kubernetes_errors, load, talos_errors
from helpers.support import REPO
from jsonschema import Draft202012Validator

pytestmark = pytest.mark.timeout(120)  # one render of ~0.6 s and a few bash -n

PAGE = REPO / "docs" / "quickstart.md"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
HEREDOC = re.compile(r"<<'?(\w+)'?\n(.*?)^\1$", re.S | re.M)
ASSIGNMENT = re.compile(r"^([A-Z_]+)=(\S+)", re.M)
VARIABLE = re.compile(r"\$\{?([A-Z_]+)\}?")
REGISTRY = "ghcr.io/example"  # the page's REGISTRY
DIGEST = "sha256:" + "cd" * 32  # what the page's make image block takes from the script's output
# The extensions' manifest names (siderolabs/extensions nvidia-gpu/*/manifest.yaml.tmpl and
# misc/glibc/manifest.yaml.tmpl, identical at v1.13.9 ec9d5f68fcfb and v1.14.0-rc.1 5732907953bd).
KMOD_EXTENSIONS = {
    "nvidia-open-gpu-kernel-modules-production",
    "nvidia-open-gpu-kernel-modules-lts",
    "nonfree-kmod-nvidia-production",
    "nonfree-kmod-nvidia-lts",
}
OFFICIAL = KMOD_EXTENSIONS | {"glibc", "nvidia-fabricmanager-production", "nvidia-fabricmanager-lts"}
FIRMWARE_ARG = "firmware_class.path=/run/nvidia/driver/lib/firmware"  # docs/talos.md section 4


@functools.cache
def _blocks() -> tuple[tuple[str, str, str], ...]:
    """(language, body, the section heading above it) of every fenced block of the page."""
    text = PAGE.read_text()
    found = []
    for m in BLOCK.finditer(text):
        headings = re.findall(r"^#+ (.*)$|^(Talos 1\.1[34])", text[: m.start()], re.M)
        section = next((h[0] or h[1] for h in reversed(headings)), "")
        found.append((m.group(1), m.group(2), section))
    return tuple(found)


def _shell() -> list[str]:
    return [body for lang, body, _ in _blocks() if lang == "sh"]


def _variables(**overrides: str) -> dict[str, str]:
    """The page's shell variables as the "Choose" block sets them."""
    return {**dict(ASSIGNMENT.findall(_shell()[0])), **overrides}


def _expand(word: str, variables: dict[str, str]) -> str:
    return VARIABLE.sub(lambda m: variables[m.group(1)], word)


def test_every_block_is_of_a_known_kind() -> None:
    kinds = [lang for lang, _, _ in _blocks()]
    assert set(kinds) <= {"sh", "text"}, kinds
    assert kinds.count("sh") >= 8


def test_every_shell_block_parses() -> None:
    failed = {}
    for index, body in enumerate(_shell()):
        done = subprocess.run(["bash", "-n"], input=body, capture_output=True, text=True, timeout=10, check=False)
        if done.returncode != 0:
            failed[index] = done.stderr
    assert failed == {}


def test_bash_n_rejects_a_broken_block() -> None:  # the check above can fail
    done = subprocess.run(
        ["bash", "-n"], input=_shell()[1] + "\nif then\n", capture_output=True, text=True, timeout=10, check=False
    )
    assert done.returncode != 0


def _heredocs() -> list[str]:
    return [m.group(2) for body in _shell() for m in HEREDOC.finditer(body)]


def _pod_errors(doc: dict[str, Any]) -> list[str]:
    """A v1 Pod checked as the strict schema's PodTemplateSpec (metadata and spec; the kept bundle has no
    Pod kind, and a Pod is a template's fields plus apiVersion, kind and status)."""
    rest = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}
    bundle = load("kubernetes-strict.schema.json")
    schema = {"$defs": bundle["$defs"], "$ref": "#/$defs/io.k8s.api.core.v1.PodTemplateSpec"}
    return [f"{e.json_path}: {e.message}" for e in Draft202012Validator(schema).iter_errors(rest)]


def test_every_heredoc_is_a_schematic_or_a_valid_kubernetes_object() -> None:
    kinds = []
    for body in _heredocs():
        doc = yaml.safe_load(body)
        if "customization" in doc:
            kinds.append("schematic")
        elif (doc.get("apiVersion"), doc.get("kind")) == ("v1", "Pod"):
            assert _pod_errors(doc) == [], doc
            kinds.append("Pod")
        else:
            assert kubernetes_errors(doc) == [], doc
            kinds.append(doc["kind"])
    assert kinds == ["schematic", "Pod"]


def test_a_broken_pod_is_rejected() -> None:
    (pod,) = [yaml.safe_load(b) for b in _heredocs() if "kind: Pod" in b]
    pod["spec"]["containers"][0]["resource"] = pod["spec"]["containers"][0].pop("resources")
    assert _pod_errors(pod) != []


@pytest.mark.parametrize("kmod", sorted(KMOD_EXTENSIONS))
def test_the_schematic_names_only_shipped_extensions(kmod: str) -> None:
    (schematic,) = [b for b in _heredocs() if "customization" in b]
    custom = yaml.safe_load(_expand(schematic, _variables(KMOD=kmod)))["customization"]
    assert set(custom) == {"extraKernelArgs", "systemExtensions"}
    assert custom["extraKernelArgs"] == [FIRMWARE_ARG]
    names = custom["systemExtensions"]["officialExtensions"]
    assert names == [f"siderolabs/{kmod}", "siderolabs/glibc"]
    assert {n.removeprefix("siderolabs/") for n in names} <= OFFICIAL
    assert _variables()["KMOD"] in KMOD_EXTENSIONS


def test_the_talos_patches_exist_and_validate_for_their_release() -> None:
    seen = {}
    for _lang, body, section in _blocks():
        for line in body.splitlines():
            assert "--patch" not in line or "--mode=staged" in line, line  # applied by the one reboot below
        for name in re.findall(r"--patch @(\S+)", body):
            release = "v1.14.0-rc.1" if "1.14" in section else "v1.13.9"
            path = REPO / name
            assert path.is_file(), name
            assert talos_errors(path.read_text(), release) == [], (name, release)
            seen[Path(name).name] = release
    assert seen == {
        "talos-machine-config.yaml": "v1.13.9",
        "talos-nri-1.13.yaml": "v1.13.9",
        "talos-kernel-module-config.yaml": "v1.14.0-rc.1",
    }


def _set(values: dict[str, Any], dotted: str, value: str) -> None:
    """Helm's ``--set a.b=c`` for a string value (strvals; every value the page sets is a string)."""
    *parents, leaf = dotted.split(".")
    for key in parents:
        values = values.setdefault(key, {})
    values[leaf] = value


def _helm_values(variables: dict[str, str]) -> dict[str, Any]:
    (line,) = [b for b in _shell() if "helm install" in b]
    command = re.split(r"(?<!\\)\n", line.split("helm install", 1)[1])[0]  # up to its last continuation line
    words = [_expand(w, variables) for w in shlex.split(command, comments=True)]
    values: dict[str, Any] = {}
    for flag, arg in itertools.pairwise(words):
        if flag == "-f":
            (doc,) = [d for d in yaml.safe_load_all((REPO / arg).read_text()) if d]
            values = doc
        elif flag == "--set":
            key, _, value = arg.partition("=")
            _set(values, key, value)
    assert "--version" in words and words[words.index("--version") + 1] == "v26.7.0"
    return values


def test_the_node_reboots_once_into_a_platform_installer() -> None:
    text = "\n".join(_shell())
    assert "talosctl reboot" not in text
    assert text.count("talosctl upgrade ") == 1
    (installer,) = re.findall(r'^INSTALLER="([^"]+)"', text, re.M)
    # Image Factory's unified installer (siderolabs/image-factory internal/frontend/http/registry.go
    # getRequestedImage, internal/profile/profile.go): <platform>-installer, never the legacy installer/ path
    assert installer.startswith("factory.talos.dev/metal-installer/")
    assert "factory.talos.dev/installer/" not in PAGE.read_text()
    upgrade = next(b for b in _shell() if "talosctl upgrade" in b)
    assert '--image "$INSTALLER"' in upgrade


def _nvidiadriver(variables: dict[str, str]) -> dict[str, Any]:
    """docs/deploy/nvidiadriver.yaml as the page's ``sed`` line writes it: that line (its continuation
    joined) run by bash from the repository with the page's variables, up to ``| kubectl apply``."""
    (block,) = [b for b in _shell() if "nvidiadriver.yaml" in b]
    (line,) = [ln for ln in block.replace("\\\n", "").splitlines() if "nvidiadriver.yaml" in ln]
    command, _, rest = line.partition(" | ")
    assert command.startswith("sed ") and rest == "kubectl apply -f -"
    guards = [ln for ln in block.splitlines() if ln.startswith(': "${')]  # the page's empty-value guards
    done = subprocess.run(
        ["bash", "-c", "\n".join([*guards, command])],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", **variables},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (doc,) = [d for d in yaml.safe_load_all(done.stdout) if d]
    return dict(doc)


def test_the_nvidiadriver_line_stops_on_an_empty_digest() -> None:
    with pytest.raises(AssertionError, match="run the make image block of step 1 first"):
        _nvidiadriver(_variables(REGISTRY=REGISTRY, DIGEST=""))


def test_the_helm_install_and_the_nvidiadriver_give_each_release_its_own_tag(tmp_path: Path) -> None:
    values = _helm_values(_variables(REGISTRY=REGISTRY))
    cr = _nvidiadriver(_variables(REGISTRY=REGISTRY, DIGEST=DIGEST))
    assert (cr["spec"]["repository"], cr["spec"]["manager"]["version"]) == (REGISTRY, DIGEST)
    releases = ("v1.13.9", "v1.14.0-rc.1")
    rendered: Rendered = render(
        nodes=[talos_node(f"gpu-{r}", r) for r in releases],
        clusterpolicy=clusterpolicy_from_values(values),
        nvidiadrivers=[cr],
        tmp=tmp_path,
    )
    version = cr["spec"]["version"]
    for release in releases:
        ds = rendered.daemonset(f"nvidia-gpu-driver-talos{release}-")
        want = f"{REGISTRY}/talos-nvidia-driver:{version}-talos{release}"
        assert Rendered.container(ds, "nvidia-driver-ctr")["image"] == want
        assert Rendered.container(ds, "k8s-driver-manager")["image"] == f"{REGISTRY}/talos-nvidia-driver@{DIGEST}"
    assert len(rendered.daemonsets) == len(releases)


def test_the_page_applies_the_events_rbac_for_every_pool() -> None:
    text = "\n".join(_shell())
    assert "kubectl apply -f docs/deploy/driver-events-rbac.yaml" in text
    assert text.index("driver-events-rbac.yaml") < text.index("nvidiadriver.yaml")


def test_the_page_links_the_channel_alternative_and_stays_short() -> None:
    text = PAGE.read_text()
    assert "(image.md#channel-or-digest)" in text and "(operator.md#day-two)" in text
    assert len(text.splitlines()) < 250
