"""The image built through the Dockerfile's USERSPACE_SOURCE=tree route (docs/image.md): the route the default
`.run` download takes after extraction, fed with a `.run`-shaped flat tree assembled from Debian's 535.309.01
packages with the graphics libraries (scripts/make-nvidia-run-tree.sh; scripts/setup.sh builds the image
IMAGE_TREE). Like the `.run`, it carries every NVIDIA library, also libnvidia-gtk3 (needs libgtk-3) and
libnvidia-pkcs11-openssl3 (needs libcrypto.so.3), which the image does not have: init must publish anyway.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from container_support import IMAGE_DRIVER_VERSION, FixtureNode, fixture_node, run_to_end
from helpers.nvidia_sandbox import run_nvidia
from helpers.support import FIXTURES, require

pytestmark = [pytest.mark.container, pytest.mark.timeout(600)]

IMAGE_TREE = os.environ.get("IMAGE_TREE", f"talos-nvidia-driver:{IMAGE_DRIVER_VERSION}-tree")
HOST = FIXTURES / "hosts" / "talos-1.11-kmod-535"  # the image's own 535.309.01 is what the node loaded
LIB = "usr/lib/x86_64-linux-gnu"
MESSAGE = "couldn't communicate with the NVIDIA driver"


@pytest.fixture(scope="module")
def tree_image(docker_client: Any) -> Any:
    import docker.errors

    try:
        found = docker_client.images.get(IMAGE_TREE)
    except docker.errors.ImageNotFound:
        found = None
    require(found is not None, f"image {IMAGE_TREE}", how="scripts/setup.sh builds it (USERSPACE_SOURCE=tree)")
    return found


def test_image_nvidia_smi_loads_and_reports_no_driver(tree_image: Any) -> None:
    done = run_to_end(tree_image, [], entrypoint=["nvidia-smi"])
    assert done.exit_code == 9, done.stdout + done.stderr
    assert MESSAGE in done.stdout


def test_init_publishes_the_run_layout_with_its_optional_libraries(tree_image: Any, tmp_path: Path) -> None:
    node: FixtureNode = fixture_node(HOST, tmp_path)
    done = run_to_end(tree_image, ["init", "--no-wait"], env=node.container_env(), volumes=node.volumes())
    assert done.exit_code == 0, done.stdout + done.stderr
    root = node.driver_root
    v = IMAGE_DRIVER_VERSION
    for name in (f"libnvidia-gtk3.so.{v}", f"libGLX_nvidia.so.{v}", "libnvidia-egl-wayland.so.1.1.10"):
        assert (root / LIB / name).is_file(), name
    assert (root / LIB / f"vdpau/libvdpau_nvidia.so.{v}").is_file()
    assert f"libnvidia-gtk3.so.{v} needs" in done.stderr and "libgtk-3.so.0" in done.stderr
    smi = run_nvidia(["chroot", str(root), "/usr/bin/nvidia-smi"])
    assert smi.returncode == 9, smi.stdout + smi.stderr
    assert MESSAGE in smi.stdout
