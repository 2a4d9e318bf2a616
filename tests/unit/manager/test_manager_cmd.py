"""The driver-manager console script: exit codes, messages, environment."""

from __future__ import annotations

import pytest
from manager_support import Node

from driver_container.cli.manager_cmd import main


def _env(monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    p = node.paths
    for name, value in {
        "HOST_ROOT_MOUNT": p.host_root,
        "PROCFS_ROOT": p.procfs_root,
        "SYSFS_ROOT": p.sysfs_root,
        "RUN_DIR": p.run_dir,
        "USERSPACE_ROOT": p.userspace_root,
        "HOST_OS_RELEASE": p.host_os_release,
        "NODE_NAME": "gpu-1",
    }.items():
        monkeypatch.setenv(name, str(value))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "DRIVER_PLATFORM"):
        monkeypatch.delenv(name, raising=False)


def _exit_code(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    return int(caught.value.code or 0)


@pytest.mark.parametrize("node", ["ubuntu-loaded"], indirect=True)
def test_generic_host_exits_0(node: Node, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _env(monkeypatch, node)
    assert _exit_code(["uninstall_driver"]) == 0
    assert "stock k8s-driver-manager applies" in capsys.readouterr().out


@pytest.mark.parametrize("node", ["ubuntu-loaded"], indirect=True)
def test_missing_node_name_is_a_usage_error(
    node: Node, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _env(monkeypatch, node)
    monkeypatch.delenv("NODE_NAME")
    assert _exit_code(["uninstall_driver"]) == 2
    assert "driver-manager: error: NODE_NAME is not set" in capsys.readouterr().err


@pytest.mark.parametrize("node", ["talos-kmod-only-loaded"], indirect=True)
def test_talos_without_api_configuration_fails_clearly(
    node: Node, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _env(monkeypatch, node)
    assert _exit_code(["uninstall_driver"]) == 1
    err = capsys.readouterr().err
    assert "driver-manager: error: no Kubernetes API configuration: KUBECONFIG and KUBERNETES_SERVICE_HOST" in err
    assert "driver-manager: fix:" in err


@pytest.mark.parametrize("node", ["ubuntu-loaded"], indirect=True)
def test_bad_boolean_is_a_usage_error(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    _env(monkeypatch, node)
    monkeypatch.setenv("FORCE_REINSTALL", "maybe")
    assert _exit_code(["uninstall_driver"]) == 2


def test_preflight_check_is_accepted() -> None:
    assert _exit_code(["preflight_check"]) == 0
