"""driver-manager -> init through RUN_DIR, in the image, mounted as gpu-operator mounts its driver pod:
the init container (`driver-manager uninstall_driver`) gets the host root at /host; the main container
(`nvidia-driver init`) does not (NVIDIA/gpu-operator a22dbf67 manifests/state-driver/0500_daemonset.yaml).

The fixture host's nvidia.ko on disk is another build than the loaded module (srcversion differs): only
the init container can see that, and init must stop with it. The manager talks to a local HTTPS API stub
(the container uses the host's network) through a kubeconfig.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from container_support import Finished, FixtureNode, fixture_node
from helpers.support import FIXTURES
from helpers.tls import answer_json, self_signed, serve_tls

pytestmark = pytest.mark.container

HOST = FIXTURES / "hosts" / "talos-1.13-srcversion-mismatch"  # Talos v1.13.6, rebuilt 595.91.07 on disk
USERSPACE = FIXTURES / "userspace" / "debian-595.91.07"  # synthetic 595.91.07 userspace (its README)
BOOT_ID = "proc/sys/kernel/random/boot_id"
TOKEN = "container-test-token-0123456789"
NODE = "gpu-1"
VERDICT = "nvidia-driver.module-verdict.json"


class _Api(BaseHTTPRequestHandler):
    """The calls uninstall_driver makes on a node with no operand pods: GET node, list pods."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._answer(401, {"kind": "Status"})
        elif self.path.startswith(f"/api/v1/nodes/{NODE}"):
            self._answer(200, {"kind": "Node", "metadata": {"name": NODE, "labels": {}}})
        elif "/pods" in self.path:
            self._answer(200, {"kind": "PodList", "items": []})
        else:
            self._answer(404, {"kind": "Status"})

    def _answer(self, status: int, body: object) -> None:
        answer_json(self, status, body)


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    cert, key = self_signed(tmp_path, "api")
    httpd = serve_tls(ThreadingHTTPServer(("127.0.0.1", 0), _Api), cert, key)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    config = tmp_path / "kube" / "config"
    config.parent.mkdir()
    ca = base64.b64encode(cert.read_bytes()).decode()
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "t",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": f"https://127.0.0.1:{httpd.server_address[1]}",
                            "certificate-authority-data": ca,
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": TOKEN}}],
                "contexts": [{"name": "t", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    yield config
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def node(image: Any, tmp_path: Path) -> FixtureNode:
    fixture = fixture_node(HOST, tmp_path)
    boot = fixture.host / BOOT_ID
    boot.parent.mkdir(parents=True, exist_ok=True)
    boot.write_text("9a1d7c2e-1111-4222-8333-000000000001\n")
    return fixture


def _run(docker_client: Any, image: Any, command: list[str], env: dict[str, str], volumes: dict[str, Any]) -> Finished:
    # Kubernetes' `command` replaces the image's entrypoint, as the operator's pod spec does.
    container = docker_client.containers.create(
        image.id, command[1:], entrypoint=command[:1], environment=env, volumes=volumes, network_mode="host"
    )
    try:
        container.start()
        status = container.wait(timeout=120)
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        err = container.logs(stdout=False, stderr=True).decode(errors="replace")
        return Finished(int(status["StatusCode"]), out, err)
    finally:
        container.remove(force=True)


def _common(node: FixtureNode, digest: str) -> tuple[dict[str, str], dict[str, Any]]:
    env = node.container_env(userspace="/fixture/userspace") | {"NODE_NAME": NODE, "DRIVER_CONFIG_DIGEST": digest}
    volumes = {
        str(node.host / "proc"): {"bind": "/fixture/proc", "mode": "ro"},
        str(node.host / "sys"): {"bind": "/fixture/sys", "mode": "rw"},
        str(node.run_dir): {"bind": "/run/nvidia", "mode": "rw"},
        str(USERSPACE): {"bind": "/fixture/userspace", "mode": "ro"},
    }
    return env, volumes


def _manager(docker_client: Any, image: Any, node: FixtureNode, kubeconfig: Path) -> Finished:
    env, volumes = _common(node, "digest-1")
    env |= {"HOST_ROOT_MOUNT": "/host", "KUBECONFIG": "/kube/config"}
    volumes |= {
        str(node.host / "host"): {"bind": "/host", "mode": "ro"},  # the init container's host root
        str(kubeconfig.parent): {"bind": "/kube", "mode": "ro"},
    }
    return _run(docker_client, image, ["driver-manager", "uninstall_driver"], env, volumes)


def _init(docker_client: Any, image: Any, node: FixtureNode, digest: str = "digest-1") -> Finished:
    env, volumes = _common(node, digest)
    env.pop("HOST_ROOT_MOUNT", None)  # the main container has no host root: only os-release at /host-etc
    volumes[str(node.host / "host/etc/os-release")] = {"bind": "/host-etc/os-release", "mode": "ro"}
    return _run(docker_client, image, ["nvidia-driver", "init", "--no-wait"], env, volumes)


def test_a_mismatch_seen_by_the_init_container_stops_init(
    docker_client: Any, image: Any, node: FixtureNode, kubeconfig: Path
) -> None:
    manager = _manager(docker_client, image, node, kubeconfig)
    assert manager.exit_code == 0, manager.stdout + manager.stderr
    assert "module-file verdict for init: mismatch" in manager.stdout
    assert TOKEN not in manager.stdout + manager.stderr
    verdict = json.loads((node.run_dir / VERDICT).read_text())
    assert verdict["digest"] == "digest-1" and verdict["boot_id"].startswith("9a1d7c2e")

    init = _init(docker_client, image, node)
    assert init.exit_code == 1, init.stdout + init.stderr
    assert "MODULE_FILE_MISMATCH" in init.stderr and "nvidia-driver: error: verification failed" in init.stderr
    assert "driver-manager" in init.stderr  # where the facts came from is said in the log
    assert not (node.driver_root / ".driver-container/manifest.json").exists()


@pytest.mark.parametrize("stale", ["boot", "digest"])
def test_a_stale_verdict_is_ignored_with_a_warning(
    docker_client: Any, image: Any, node: FixtureNode, kubeconfig: Path, stale: str
) -> None:
    manager = _manager(docker_client, image, node, kubeconfig)
    assert manager.exit_code == 0, manager.stdout + manager.stderr
    digest = "digest-1"
    if stale == "boot":
        (node.host / BOOT_ID).write_text("9a1d7c2e-1111-4222-8333-000000000002\n")  # rebooted since
    else:
        digest = "digest-2"  # another driver config than the one the verdict was made for
    init = _init(docker_client, image, node, digest)
    assert init.exit_code == 0, init.stdout + init.stderr
    assert "stale verdict of driver-manager ignored" in init.stderr
    assert ("boot_id" if stale == "boot" else "digest") in init.stderr
    assert "MODULE_FILE_MISSING" in init.stderr  # nothing verified, and it says so
    assert (node.driver_root / ".driver-container/manifest.json").is_file()
