"""The Dockerfile's default route, USERSPACE_SOURCE=archive (docs/image.md): NVIDIA's driver archive downloaded,
checked against its sha256 and sha512 pins and laid out by its MANIFEST, the way release builds take the archive
Talos pins. NVIDIA's server is out of reach here, so scripts/setup.sh builds IMAGE_ARCHIVE from an archive in
NVIDIA's layout made of Debian's 535.309.01 files (scripts/make-nvidia-archive.py, in the artefacts), served over
loopback HTTP; these tests serve the same archive to the same stage with wrong pins, which must fail the build
with both values. The image's published root runs the real toolkit and validator tests too
(tests/helpers/published_roots.py ``535-archive-image``).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from container_support import IMAGE_DRIVER_VERSION, FixtureNode, fixture_node, run_to_end
from helpers.support import ARTEFACTS, FIXTURES, REPO, require

pytestmark = [pytest.mark.container, pytest.mark.artefact, pytest.mark.timeout(600)]

IMAGE_ARCHIVE = os.environ.get("IMAGE_ARCHIVE", f"talos-nvidia-driver:{IMAGE_DRIVER_VERSION}-archive")
ARCHIVE_DIR = ARTEFACTS / "nvidia-archive-535"
ARCHIVE = ARCHIVE_DIR / "nvidia_driver-linux-x86_64-535.309.01-archive.tar.xz"
HOST = FIXTURES / "hosts" / "talos-1.11-kmod-535"
LIB = "usr/lib/x86_64-linux-gnu"
SUPPORTED_GPUS = "/usr/share/nvidia-driver-assistant/supported-gpus/supported-gpus.json"


@pytest.fixture(scope="module")
def archive_image(docker_client: Any) -> Any:
    import docker.errors

    try:
        found = docker_client.images.get(IMAGE_ARCHIVE)
    except docker.errors.ImageNotFound:
        found = None
    require(found is not None, f"image {IMAGE_ARCHIVE}", how="scripts/setup.sh builds it (USERSPACE_SOURCE=archive)")
    return found


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """The archive's URL on a loopback HTTP server (the build runs with --network host)."""
    require(ARCHIVE.is_file(), f"the NVIDIA-layout archive {ARCHIVE}", how="scripts/setup.sh makes it")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(ARCHIVE_DIR))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{ARCHIVE.name}"
    finally:
        server.shutdown()
        server.server_close()


def _pin(algorithm: str) -> str:
    return Path(f"{ARCHIVE}.{algorithm}").read_text().strip()


def _build_fetch_stage(url: str, sha256: str, sha512: str) -> subprocess.CompletedProcess[str]:
    """The archive route's download-and-verify stage alone, through the build script's BuildKit client."""
    args = [
        "--network",
        "host",
        "--progress",
        "plain",
        "--target",
        "nvidia-fetch-archive",
        "--build-arg",
        "BASE_IMAGE=debian:bookworm-slim",
        "--build-arg",
        f"DRIVER_VERSION={IMAGE_DRIVER_VERSION}",
        "--build-arg",
        f"NVIDIA_ARCHIVE_URL={url}",
        "--build-arg",
        f"NVIDIA_ARCHIVE_SHA256={sha256}",
        "--build-arg",
        f"NVIDIA_ARCHIVE_SHA512={sha512}",
        "-t",
        "talos-nvidia-driver-test:wrong-pin",
        ".",
    ]
    return subprocess.run(
        ["bash", "-c", 'source scripts/docker-build.sh && docker_build "$@"', "docker_build", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=480,
        check=False,
    )


@pytest.mark.parametrize("wrong", ["sha256", "sha512"])
def test_a_wrong_pin_fails_the_build_with_both_values(docker_client: Any, served: str, wrong: str) -> None:
    pins = {"sha256": _pin("sha256"), "sha512": _pin("sha512")}
    bad = pins[wrong][::-1]
    done = _build_fetch_stage(served, **(pins | {wrong: bad}))
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    assert "does not match its pins" in output, output[-3000:]
    assert f"{wrong} expected {bad}" in output and f"{wrong} actual   {pins[wrong]}" in output, output[-3000:]


def test_a_build_without_the_sha512_pin_fails(docker_client: Any, served: str) -> None:
    done = _build_fetch_stage(served, _pin("sha256"), "")
    assert done.returncode != 0
    assert "NVIDIA_ARCHIVE_SHA256 and NVIDIA_ARCHIVE_SHA512 are both required" in done.stdout + done.stderr


def _cat(image: Any, path: str) -> str:
    done = run_to_end(image, [path], entrypoint=["cat"])
    assert done.exit_code == 0, done.stderr
    return done.stdout


def test_the_image_carries_the_archives_manifest_set_licences_and_supported_gpus(archive_image: Any) -> None:
    done = run_to_end(archive_image, ["-c", f"ls /{LIB} /{LIB}/vdpau /usr/bin /licenses/*"], entrypoint=["sh"])
    assert done.exit_code == 0, done.stderr
    listed = set(done.stdout.split())
    v = IMAGE_DRIVER_VERSION
    assert {f"libcuda.so.{v}", "libcuda.so.1", "libcuda.so", f"libvdpau_nvidia.so.{v}", "nvidia-smi"} <= listed
    assert {"LICENSE", "NOTICE"} <= listed  # NVIDIA's (/licenses/NVIDIA) and this project's
    assert "nvidia-installer" not in listed  # in MANIFEST, not a driver container's file
    chips = json.loads(_cat(archive_image, SUPPORTED_GPUS))["chips"]
    assert chips and all(c["devid"].startswith("0x") for c in chips)
    assert "test archive" in _cat(archive_image, "/licenses/NVIDIA/LICENSE")
    assert (REPO / "LICENSE").read_text() == _cat(archive_image, "/licenses/talos-nvidia-driver-container/LICENSE")
    source = dict(line.split("=", 1) for line in _cat(archive_image, "/usr/share/nvidia/driver-archive").split())
    assert source["sha256"] == _pin("sha256") and source["sha512"] == _pin("sha512")
    labels = archive_image.labels
    assert labels["io.nvidia.driver.userspace-source"] == "archive"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0 AND LicenseRef-NVIDIA-Driver"


def test_init_publishes_the_archive_routes_userspace(archive_image: Any, tmp_path: Path) -> None:
    node: FixtureNode = fixture_node(HOST, tmp_path)
    done = run_to_end(archive_image, ["init", "--no-wait"], env=node.container_env(), volumes=node.volumes())
    assert done.exit_code == 0, done.stdout + done.stderr
    root = node.driver_root
    assert (root / LIB / f"libcuda.so.{IMAGE_DRIVER_VERSION}").is_file()
    assert (root / "usr/bin/nvidia-smi").is_file()
