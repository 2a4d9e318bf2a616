"""Container-test helpers (not fixtures): fixture nodes mounted the way gpu-operator mounts the driver
container, and containers that are always removed. testcontainers' reaper image cannot be pulled here, so
Ryuk is disabled and every test removes its own container.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.support import require

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

IMAGE = os.environ.get("IMAGE", "talos-nvidia-driver:535.309.01-debian")
# scripts/release-build.sh runs these tests on the image of any driver version it built.
IMAGE_DRIVER_VERSION = os.environ.get("IMAGE_DRIVER_VERSION", "535.309.01")


@dataclass(frozen=True)
class Finished:
    exit_code: int
    stdout: str
    stderr: str


Volumes = dict[str, dict[str, str]]


@dataclass(frozen=True)
class FixtureNode:
    """A private copy of a host fixture (init writes under its sys/) and the RUN_DIR shared with the host."""

    host: Path
    run_dir: Path

    @property
    def driver_root(self) -> Path:
        return self.run_dir / "driver"

    def fixture_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for line in (self.host / "env").read_text().splitlines():
            key, _, value = line.partition("=")
            if value and not key.lstrip().startswith("#"):
                env[key.strip()] = value.strip()
        return env

    def container_env(self, *, userspace: str | None = None) -> dict[str, str]:
        env = self.fixture_env() | {
            "PROCFS_ROOT": "/fixture/proc",
            "SYSFS_ROOT": "/fixture/sys",
            "RUN_DIR": "/run/nvidia",
            "HOST_DRIVER_ROOT": str(self.driver_root),
        }
        return env | ({"USERSPACE_ROOT": userspace} if userspace else {})

    def volumes(self, **extra: dict[str, str]) -> Volumes:
        # The mounts gpu-operator gives the driver container (NVIDIA/gpu-operator
        # assets/state-driver/0500_daemonset.yaml @ 10ee5b36): os-release at
        # /host-etc/os-release, the host root, /proc and /sys (here the fixture's, through PROCFS_ROOT and
        # SYSFS_ROOT), the drivers config dir, the run dir (read-write, shared with the host side).
        mounts: Volumes = {
            str(self.host / "host/etc/os-release"): {"bind": "/host-etc/os-release"},
            str(self.host / "host"): {"bind": "/host"},
            str(self.host / "proc"): {"bind": "/fixture/proc"},
            str(self.host / "sys"): {"bind": "/fixture/sys", "mode": "rw"},
            str(self.run_dir): {"bind": "/run/nvidia", "mode": "rw"},
        }
        if (self.host / "drivers").is_dir():
            mounts[str(self.host / "drivers")] = {"bind": "/drivers"}
        return mounts | {host: spec for host, spec in extra.items()}


def fixture_node(fixture: Path, base: Path) -> FixtureNode:
    require(fixture.is_dir(), f"fixture host {fixture}", how="committed under tests/fixtures/hosts")
    host = Path(shutil.copytree(fixture, base / "host-fixture", symlinks=True))
    run_dir = base / "run"
    run_dir.mkdir()
    return FixtureNode(host, run_dir)


def _container(
    image: Any,
    command: list[str],
    *,
    entrypoint: list[str] | None,
    env: dict[str, str] | None,
    volumes: Volumes | None,
    privileged: bool,
    cap_add: list[str] | None = None,
    device_rules: list[str] | None = None,
) -> Any:
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(image.id).with_command(command)
    for key, value in (env or {}).items():
        container = container.with_env(key, value)
    for host, spec in (volumes or {}).items():
        container = container.with_volume_mapping(host, spec["bind"], spec.get("mode", "ro"))
    kwargs: dict[str, Any] = {"privileged": privileged}
    if cap_add:
        kwargs["cap_add"] = cap_add
    if device_rules:  # device cgroup rules: what a privileged pod may open in /dev (docker --device-cgroup-rule)
        kwargs["device_cgroup_rules"] = device_rules
    if entrypoint is not None:
        kwargs["entrypoint"] = entrypoint
    return container.with_kwargs(**kwargs)


def _start(container: Any) -> Any:
    """Start a testcontainers container; one that was created but failed to start is removed too."""
    try:
        container.start()
    except Exception:
        created = container.get_wrapped_container()
        if created is not None:
            created.remove(force=True)
        raise
    return container.get_wrapped_container()


@contextmanager
def detached(
    image: Any,
    command: list[str],
    *,
    env: dict[str, str] | None = None,
    volumes: Volumes | None = None,
    privileged: bool = False,
    entrypoint: list[str] | None = None,
    cap_add: list[str] | None = None,
) -> Iterator[Any]:
    """A running container (the docker SDK object), force-removed at exit whatever happens."""
    container = _container(
        image, command, entrypoint=entrypoint, env=env, volumes=volumes, privileged=privileged, cap_add=cap_add
    )
    wrapped = _start(container)
    try:
        yield wrapped
    finally:
        wrapped.remove(force=True)


def wait_for_log(container: Any, text: str, *, count: int = 1, timeout: float = 60) -> str:
    """Poll the container's logs until ``text`` shows up ``count`` times; fail with the logs when it exits or
    times out."""
    deadline = time.monotonic() + timeout
    while True:
        logs = container.logs().decode(errors="replace")
        if logs.count(text) >= count:
            return logs
        container.reload()
        if container.status == "exited" or time.monotonic() > deadline:
            raise AssertionError(f"{text!r} x{count} not in the logs (status {container.status}):\n{logs}")
        time.sleep(0.2)


def run_to_end(
    image: Any,
    command: list[str],
    *,
    timeout: float = 120,
    entrypoint: list[str] | None = None,
    env: dict[str, str] | None = None,
    volumes: Volumes | None = None,
    privileged: bool = False,
    cap_add: list[str] | None = None,
    device_rules: list[str] | None = None,
) -> Finished:
    """Run a container to completion with testcontainers and remove it, whatever happens."""
    container = _container(
        image,
        command,
        entrypoint=entrypoint,
        env=env,
        volumes=volumes,
        privileged=privileged,
        cap_add=cap_add,
        device_rules=device_rules,
    )
    wrapped = _start(container)
    try:
        status = wrapped.wait(timeout=timeout)
        stdout = wrapped.logs(stdout=True, stderr=False).decode(errors="replace")
        stderr = wrapped.logs(stdout=False, stderr=True).decode(errors="replace")
        return Finished(int(status["StatusCode"]), stdout, stderr)
    finally:
        wrapped.remove(force=True)
