"""Container-test fixtures: the engine and the locally built image.

Prerequisites come from scripts/setup.sh (engine via scripts/dockerd.sh, image built from the Dockerfile's
offline route); helpers are in container_support.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from container_support import IMAGE
from helpers.support import require, require_module


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    docker = require_module("docker", how="pip install -e '.[test]' (testcontainers brings docker)")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # any connection failure means: no engine
        client = None
        reason = f"{type(exc).__name__}: {exc}"
    require(client is not None, f"a Docker engine ({reason if client is None else ''})", how="scripts/dockerd.sh start")
    yield client
    client.close()


@pytest.fixture(scope="session")
def privileged_allowed(docker_client: Any, image: Any) -> bool:
    """Whether this engine can start a --privileged container at all.

    Where dockerd itself runs without the full capability set (inside another container, as on the
    project's build machines), runc fails with "unable to apply caps" for every privileged container.
    """
    import docker.errors

    probe = docker_client.containers.create(image.id, entrypoint=["true"], privileged=True)
    try:
        probe.start()
    except docker.errors.APIError as exc:
        if "apply caps" in str(exc):
            return False
        raise
    finally:
        probe.remove(force=True)  # created even when it cannot start
    return True


@pytest.fixture(scope="session")
def image(docker_client: Any) -> Any:
    import docker.errors

    try:
        found = docker_client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        found = None
    require(found is not None, f"image {IMAGE}", how="scripts/setup.sh builds it")
    return found
