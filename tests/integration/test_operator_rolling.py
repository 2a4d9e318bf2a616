"""A talosctl upgrade that changes the driver, through gpu-operator v26.7.0's own rendering: no edit.

docs/deploy/nvidiadriver.yaml sets ``version: production``. The operator (tests/helpers/operator_render.py)
renders one DaemonSet per node pool and appends the pool's ``-talos<VERSION_ID>``; the release matrix
(scripts/release-matrix.py ``tags``) publishes ``production-talos<release>`` on the image of the driver that
release ships. Two pools: Talos v1.13.8 (production 595.71.05) and v1.13.9 (595.91.07), rows of
release/talos-drivers.toml. Each pool's image must hold the userspace ``init`` accepts on that pool's
fixture host (talos-1.13-open-595 re-stamped to the release's driver), and the crossed pairing is refused.
A digest (``version: sha256:…``) is used as is on every pool; the form the docs once gave
(``image: …@sha256:…`` with repository and version set) is mangled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.hostenv import HOSTS, USERSPACE, make_host
from helpers.operator_render import Rendered, clusterpolicy_from_values, render, require_renderer, talos_node
from helpers.release import release_matrix
from helpers.restamp import FIXTURE_RELEASE, restamped
from helpers.support import REPO

OWNER = "ghcr.io/example"
REPOSITORY = f"{OWNER}/talos-nvidia-driver"
POOLS = {"v1.13.8": "595.71.05", "v1.13.9": "595.91.07"}
KERNEL = "6.18.44-talos"  # the fixture host's kernel, given to both pools
DIGEST = "sha256:" + "ab" * 32


rm = release_matrix()


def _nvidiadriver(**spec: Any) -> dict[str, Any]:
    (cr,) = [d for d in yaml.safe_load_all((REPO / "docs/deploy/nvidiadriver.yaml").read_text()) if d]
    for section in (cr["spec"], cr["spec"]["manager"]):
        section["repository"] = OWNER
    cr["spec"].update(spec)
    return dict(cr)


def _values(**driver: Any) -> dict[str, Any]:
    (values,) = [d for d in yaml.safe_load_all((REPO / "docs/deploy/gpu-operator-values.yaml").read_text()) if d]
    for section in (values["driver"], values["driver"]["manager"]):
        section["repository"] = OWNER
    values["driver"].update(driver)
    return dict(values)


def _nodes() -> list[dict[str, Any]]:
    return [talos_node(f"gpu-{release}", release, kernel=KERNEL) for release in POOLS]


def _images(rendered: Rendered) -> dict[str, str]:
    """Talos release of each pool -> its driver container's image."""
    out = {}
    for ds in rendered.daemonsets:
        (release,) = {v for k, v in ds["spec"]["template"]["spec"]["nodeSelector"].items() if "VERSION_ID" in k}
        out[release] = Rendered.container(ds, "nvidia-driver-ctr")["image"]
    return out


def _driver_of(image: str) -> str:
    """The driver whose published image carries this tag (the plan and the release push tag it so)."""
    releases = rm.load()
    (driver,) = [d for d in rm.drivers(releases) if image in rm.tags(releases, d, REPOSITORY)]
    return str(driver)


@pytest.mark.timeout(240)
def test_one_channel_gives_each_pool_the_userspace_its_talos_release_loads(tmp_path: Path) -> None:
    require_renderer()
    releases = {r.release: r for r in rm.load()}
    assert {r: releases[r].production for r in POOLS} == POOLS  # two rows that ship different drivers
    images = _images(render(nodes=_nodes(), nvidiadrivers=[_nvidiadriver()], tmp=tmp_path / "render"))
    assert images == {r: f"{REPOSITORY}:production-talos{r}" for r in POOLS}
    drivers = {release: _driver_of(image) for release, image in images.items()}
    assert drivers == POOLS
    hosts = {r: restamped(HOSTS / "talos-1.13-open-595", tmp_path / f"host-{r}", d, r) for r, d in POOLS.items()}
    userspaces = {d: restamped(USERSPACE, tmp_path / f"userspace-{d}", d, FIXTURE_RELEASE) for d in POOLS.values()}
    for release, host_tree in hosts.items():
        for driver, userspace in userspaces.items():
            host = make_host(tmp_path / f"run-{release}-{driver}", str(host_tree), userspace)
            done = host.run("init", "--no-wait")
            if driver == drivers[release]:
                assert done.returncode == 0, done.stderr[-3000:]
                assert host.status() == "Ready"
            else:
                assert done.returncode != 0 and "VERSION_MISMATCH" in done.stderr, done.stderr[-3000:]
                assert host.status() != "Ready"


def test_a_digest_is_used_as_is_on_every_pool_and_the_old_image_at_digest_form_is_mangled(tmp_path: Path) -> None:
    require_renderer()
    pinned = _images(render(nodes=_nodes(), nvidiadrivers=[_nvidiadriver(version=DIGEST)], tmp=tmp_path / "a"))
    assert pinned == {r: f"{REPOSITORY}@{DIGEST}" for r in POOLS}  # no OS suffix, one image
    old_form = _nvidiadriver(image=f"talos-nvidia-driver@{DIGEST}", version="595.91.07")
    with pytest.raises(RuntimeError, match=rf"invalid reference \"{REPOSITORY}@{DIGEST}:595.91.07\""):
        render(nodes=_nodes(), nvidiadrivers=[old_form], tmp=tmp_path / "b")  # the reconcile fails
    values = _values(image=f"talos-nvidia-driver@{DIGEST}", version="595.91.07")
    (ds,) = render(nodes=_nodes()[1:], clusterpolicy=clusterpolicy_from_values(values), tmp=tmp_path / "c").daemonsets
    # Not a reference a runtime can pull: the pod stays in InvalidImageName.
    assert Rendered.container(ds, "nvidia-driver-ctr")["image"] == f"{REPOSITORY}@{DIGEST}:595.91.07"
    # docs/image.md states both outcomes, and no longer offers the form.
    image_doc = (REPO / "docs/image.md").read_text()
    assert "`<repository>/talos-nvidia-driver@sha256:<digest>:<version>`" in image_doc
    assert "invalid reference" in image_doc and "`driver.image@sha256" not in image_doc
