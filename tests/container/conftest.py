"""Container-test helpers: the engine, the locally built image, and containers that are always removed.

Prerequisites come from scripts/setup.sh (engine via scripts/dockerd.sh, image built from the Dockerfile's
offline route). testcontainers' reaper image cannot be pulled here, so Ryuk is disabled and every test
removes its own container.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support import require

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

IMAGE = os.environ.get("IMAGE", "talos-nvidia-driver:535.309.01-debian")
IMAGE_DRIVER_VERSION = "535.309.01"


@dataclass(frozen=True)
class Finished:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # any connection failure means: no engine
        client = None
        reason = f"{type(exc).__name__}: {exc}"
    require(client is not None, f"a Docker engine ({reason if client is None else ''})",
            how="scripts/dockerd.sh start")
    yield client
    client.close()


@pytest.fixture(scope="session")
def image(docker_client: Any) -> Any:
    import docker.errors

    try:
        found = docker_client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        found = None
    require(found is not None, f"image {IMAGE}", how="scripts/setup.sh builds it")
    return found


def run_to_end(image: Any, command: list[str], *, timeout: float = 120, entrypoint: list[str] | None = None,
               env: dict[str, str] | None = None, volumes: dict[str, dict[str, str]] | None = None) -> Finished:
    """Run a container to completion with testcontainers and remove it, whatever happens."""
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(image.id).with_command(command)
    for key, value in (env or {}).items():
        container = container.with_env(key, value)
    for host, spec in (volumes or {}).items():
        container = container.with_volume_mapping(host, spec["bind"], spec.get("mode", "ro"))
    if entrypoint is not None:
        container = container.with_kwargs(entrypoint=entrypoint)
    container.start()
    wrapped = container.get_wrapped_container()
    try:
        status = wrapped.wait(timeout=timeout)
        stdout = wrapped.logs(stdout=True, stderr=False).decode(errors="replace")
        stderr = wrapped.logs(stdout=False, stderr=True).decode(errors="replace")
        return Finished(int(status["StatusCode"]), stdout, stderr)
    finally:
        wrapped.remove(force=True)
