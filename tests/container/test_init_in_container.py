"""`init` inside the image against a fixture Talos host, publishing into a host directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from container_support import FixtureNode, fixture_node, run_to_end
from helpers.support import FIXTURES

# Containers start in seconds, but a cold engine or image pull can take minutes: 10 minutes per test.
pytestmark = [pytest.mark.container, pytest.mark.timeout(600)]

HOST = FIXTURES / "hosts" / "talos-1.13-open-595"  # Talos v1.13.9, open 595.91.07 (see its README)
USERSPACE = FIXTURES / "userspace" / "debian-595.91.07"  # synthetic 595.91.07 userspace (its README)


def _init_once(image: Any, node: FixtureNode) -> Any:
    # The fixture's synthetic userspace replaces the image's 535 one, so versions match the fixture host.
    volumes = node.volumes(**{str(USERSPACE): {"bind": "/fixture/userspace"}})
    env = node.container_env(userspace="/fixture/userspace")
    return run_to_end(image, ["init", "--no-wait"], env=env, volumes=volumes)


@pytest.fixture
def node(image: Any, tmp_path: Path) -> FixtureNode:
    return fixture_node(HOST, tmp_path)


def test_init_publishes_a_driver_root_visible_from_the_host(image: Any, node: FixtureNode) -> None:
    version = node.fixture_env()["DRIVER_VERSION"]
    done = _init_once(image, node)
    assert done.exit_code == 0, done.stdout + done.stderr
    root = node.driver_root
    assert (root / ".driver-container/manifest.json").is_file()
    assert (root / "sbin/ldconfig").is_file()
    assert (root / "etc/ld.so.cache").is_file()
    assert list((root / "usr/lib/x86_64-linux-gnu").glob(f"libnvidia-ml.so.{version}"))
    assert (node.run_dir / "validations/.driver-daemons-status").read_text().strip() == "Ready"
    assert not (node.run_dir / "nvidia-driver.pid").exists()

    # The startup probe's own checks, as its script does them from the host side.
    assert (root / "usr/bin/nvidia-smi").is_file()
    for link in root.rglob("*"):
        if link.is_symlink():
            assert not str(link.readlink()).startswith("/"), f"absolute link {link}"
            assert link.resolve().is_relative_to(root.resolve()), f"{link} escapes the root"


def test_second_init_on_the_same_run_dir_rewrites_nothing(image: Any, node: FixtureNode) -> None:
    first = _init_once(image, node)
    assert first.exit_code == 0, first.stdout + first.stderr
    root = node.driver_root
    before = {p: p.lstat().st_mtime_ns for p in root.rglob("*") if p.name != "nvidia-driver.state"}
    second = _init_once(image, node)
    assert second.exit_code == 0, second.stdout + second.stderr
    after = {p: p.lstat().st_mtime_ns for p in root.rglob("*") if p.name != "nvidia-driver.state"}
    assert after == before
