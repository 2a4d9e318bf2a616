"""The samples of docs/deploy render with gpu-operator v26.7.0's own code exactly as shipped, nothing
filled in: every image the operator writes is a valid, non-empty reference (the distribution reference
grammar), so an unedited copy fails to pull from the reserved placeholder registry, loudly, and never
ends in the operator's "repository, image and version must all be set" with no driver DaemonSet at all
(tests/helpers/operator_render.py runs the operator)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.operator_render import (
    PLACEHOLDER_REGISTRY,
    Rendered,
    clusterpolicy_from_values,
    containers_of,
    render,
    require_renderer,
    talos_node,
)
from helpers.support import REPO

pytestmark = pytest.mark.timeout(120)  # three renders of ~0.6 s

DEPLOY = REPO / "docs" / "deploy"
RELEASES = ("v1.13.9", "v1.14.0-rc.1")
# github.com/distribution/reference regexp.go (name components lower case, an optional domain with port,
# a tag of up to 128 word characters, a digest): the grammar every container runtime parses images with.
_DOMAIN = (
    r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*"
)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(
    rf"^(?:{_DOMAIN}(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


def _shipped(name: str) -> list[dict[str, Any]]:
    return [dict(d) for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def _images(rendered: Rendered) -> list[str]:
    return [str(c.get("image", "")) for ds in rendered.daemonsets for c in containers_of(ds)]


def _assert_valid(images: list[str]) -> None:
    assert images
    for image in images:
        assert image and REFERENCE.match(image) and len(image.split("@")[0].rsplit(":", 1)[0]) <= 255, image


def test_the_reference_check_refuses_what_a_runtime_refuses() -> None:
    for bad in ("", "ghcr.io/OWNER/talos-nvidia-driver:production-talosv1.13.9", "/talos-nvidia-driver:x", "r/i:"):
        assert not REFERENCE.match(bad), bad
    assert REFERENCE.match(f"{PLACEHOLDER_REGISTRY}/talos-nvidia-driver@sha256:{'a' * 64}")


def test_the_nvidiadriver_sample_renders_unmodified_into_valid_images(tmp_path: Path) -> None:
    require_renderer()
    (values,) = _shipped("gpu-operator-values.yaml")
    values["driver"]["nvidiaDriverCRD"] = {"enabled": True, "deployDefaultCR": False}  # the quickstart's --set
    rendered = render(
        nodes=[talos_node(f"gpu-{r}", r) for r in RELEASES],
        clusterpolicy=clusterpolicy_from_values(values),
        nvidiadrivers=_shipped("nvidiadriver.yaml"),
        tmp=tmp_path,
    )
    assert len(rendered.daemonsets) == len(RELEASES)  # one per Talos release: the reconcile did not stop
    _assert_valid(_images(rendered))
    for release in RELEASES:
        ds = rendered.daemonset(f"nvidia-gpu-driver-talos{release}-")
        image = Rendered.container(ds, "nvidia-driver-ctr")["image"]
        assert image == f"{PLACEHOLDER_REGISTRY}/talos-nvidia-driver:production-talos{release}"
        assert (
            Rendered.container(ds, "k8s-driver-manager")["image"]
            == f"{PLACEHOLDER_REGISTRY}/talos-nvidia-driver:manager"
        )


def test_the_helm_values_sample_renders_unmodified_into_valid_images(tmp_path: Path) -> None:
    require_renderer()
    (values,) = _shipped("gpu-operator-values.yaml")
    rendered = render(
        nodes=[talos_node("gpu-0", "v1.13.9")], clusterpolicy=clusterpolicy_from_values(values), tmp=tmp_path
    )
    (ds,) = rendered.daemonsets
    _assert_valid(_images(rendered))
    image = Rendered.container(ds, "nvidia-driver-ctr")["image"]
    assert image == f"{PLACEHOLDER_REGISTRY}/talos-nvidia-driver:production-talosv1.13.9"
