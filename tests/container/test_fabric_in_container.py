"""`init` in the image on a simulated NVSwitch node, with fake Fabric Manager and nvidia-smi baked into a
small image derived FROM the image under test (the production image is not changed): Fabric Manager
starts from the image, its config copy carries the NVFM_CONFIG_* overrides, the pid file lands in the
operator's /run/nvidia-fabricmanager mount, the API socket in the driver root, Ready comes after the
fabric completed, and `docker stop` stops Fabric Manager.

The node is the Talos 1.11 / 535.309.01 fixture (the image's driver version) with the nvidia-nvswitch
procfs entries of tests/fixtures/hosts/talos-1.13-hgx-h100-nvswitch added.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from container_support import FixtureNode, detached, fixture_node, wait_for_log
from helpers.fakes import FABRICMANAGER_CFG, FAKE_FABRIC, FAKE_NVIDIA_SMI
from helpers.support import FIXTURES

pytestmark = pytest.mark.container

HOST = FIXTURES / "hosts" / "talos-1.11-kmod-535"
NVSWITCH = FIXTURES / "hosts" / "talos-1.13-hgx-h100-nvswitch" / "proc/driver/nvidia-nvswitch"
READY_LINE = "Done, now waiting for signal"


@pytest.fixture
def fake_fabric_image(docker_client: Any, image: Any, tmp_path: Path) -> Iterator[Any]:
    """The image under test plus fake nv-fabricmanager (where NVIDIA's package puts it, with a config)
    and a fake nvidia-smi first on PATH; removed afterwards."""
    context = tmp_path / "derived"
    context.mkdir()
    (context / "nv-fabricmanager").write_text("#!/usr/bin/python3\n" + FAKE_FABRIC.read_text())
    (context / "nvidia-smi").write_text("#!/usr/bin/python3\n" + FAKE_NVIDIA_SMI.read_text())
    (context / "fabricmanager.cfg").write_text(FABRICMANAGER_CFG)
    for script in ("nv-fabricmanager", "nvidia-smi"):
        (context / script).chmod(0o755)  # COPY keeps the mode (the legacy builder has no --chmod)
    (context / "Dockerfile").write_text(
        f"FROM {image.id}\n"
        "COPY nv-fabricmanager /usr/bin/nv-fabricmanager\n"
        "COPY fabricmanager.cfg /usr/share/nvidia/nvswitch/fabricmanager.cfg\n"
        # /usr/local/bin is before /usr/bin on PATH; publish takes /usr/bin/nvidia-smi (the real one).
        "COPY nvidia-smi /usr/local/bin/nvidia-smi\n"
    )
    tag = f"talos-nvidia-driver:fabric-fakes-{uuid.uuid4().hex[:8]}"
    derived, _ = docker_client.images.build(path=str(context), tag=tag, rm=True, forcerm=True)
    try:
        yield derived
    finally:
        docker_client.images.remove(derived.id, force=True)


@pytest.fixture
def node(image: Any, tmp_path: Path) -> FixtureNode:
    made = fixture_node(HOST, tmp_path)
    shutil.copytree(NVSWITCH, made.host / "proc/driver/nvidia-nvswitch")
    return made


def test_fabric_manager_from_the_image_until_docker_stop(
    fake_fabric_image: Any, node: FixtureNode, tmp_path: Path
) -> None:
    fm_run, fake = tmp_path / "run-nvidia-fabricmanager", tmp_path / "fake"
    fm_run.mkdir()
    fake.mkdir()
    env = node.container_env() | {
        "NVIDIA_PERSISTENCED": "false",  # no GPU here: a real persistenced would die at once
        "FAKE_LOG": "/fake/calls.log",
        "FAKE_DIR": "/fake",
        "FAKE_FABRIC_RUN_DIR": "/run/nvidia-fabricmanager",
        "FAKE_FABRIC_DELAY": "1",
        "NVFM_CONFIG_LOG_LEVEL": "3",
        "FABRIC_WAIT_TIMEOUT": "60",
    }
    volumes = node.volumes(
        **{
            str(fm_run): {"bind": "/run/nvidia-fabricmanager", "mode": "rw"},  # as gpu-operator mounts it
            str(fake): {"bind": "/fake", "mode": "rw"},
        }
    )
    with detached(fake_fabric_image, ["init"], env=env, volumes=volumes) as container:
        logs = wait_for_log(container, READY_LINE, timeout=120)
        assert "fabric completed on 8 GPU(s)" in logs
        assert (node.run_dir / "validations/.driver-daemons-status").read_text() == "Ready"
        assert (fake / "fabric-state").read_text() == "Completed"
        calls = (fake / "calls.log").read_text().splitlines()
        # The fake FM logs once its interpreter is up; init may already poll nvidia-smi -q by then.
        assert next(c for c in calls if "nv-fabricmanager" in c) == (
            "/usr/bin/nv-fabricmanager -c /run/nvidia-fabricmanager/fabricmanager.cfg"
        )
        seen = (fake / "fm-config-seen.cfg").read_text().splitlines()
        assert "LOG_LEVEL=3" in seen and "DAEMONIZE=0" in seen
        assert "FM_CMD_UNIX_SOCKET_PATH=/run/nvidia/driver/run/nvidia-fabricmanager/socket" in seen
        assert (node.driver_root / "run/nvidia-fabricmanager/socket").exists()  # visible from the host
        assert (fm_run / "nv-fabricmanager.pid").read_text().strip().isdigit()
        container.stop(timeout=15)
        container.reload()
        assert container.attrs["State"]["ExitCode"] == 0, container.logs().decode(errors="replace")
    assert "nv-fabricmanager stopped" in (fake / "calls.log").read_text().splitlines()
    assert not (fm_run / "nv-fabricmanager.pid").exists()
    assert not (node.driver_root / "run/nvidia-fabricmanager/socket").exists()
