"""driver-manager on fixture nodes: what it reads, what it changes, and what it refuses."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest
from helpers.opened import opened_paths
from manager_support import FakeApi, Node

from driver_container.base.errors import ForbiddenCommandError, HostDriverPresentError
from driver_container.base.paths import HostPaths
from driver_container.formats.kernel.mountinfo import mounts_at_or_below
from driver_container.manager.facts import NodeFacts, gather_facts
from driver_container.manager.labels import (
    PAUSED,
    operand_selector,
    pause_patch,
    paused_value,
    restore_patch,
    restored_value,
)
from driver_container.manager.manager import ManagerOptions, run_preflight, run_uninstall
from driver_container.runtime.runner import MODULE_TOOLS, Runner
from driver_container.settings import Settings

OPTIONS = ManagerOptions(node_name="gpu-1", driver_config_digest="digest-new", host_driver_delay=0)
OPERAND_LABELS = {
    "nvidia.com/gpu.deploy.driver": "true",
    "nvidia.com/gpu.deploy.device-plugin": "true",
    "nvidia.com/gpu.deploy.dcgm-exporter": "false",
    "nvidia.com/gpu.deploy.container-toolkit": "custom",
    "feature.node.kubernetes.io/pci-10de.present": "true",
}


# -- pure rules -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "paused", "restored"),
    [
        ("true", PAUSED, "true"),
        ("false", "false", "false"),
        (PAUSED, PAUSED, "true"),
        ("custom", f"custom_{PAUSED}", "custom"),
        (f"custom_{PAUSED}", f"custom_{PAUSED}", "custom"),
    ],
)
def test_pause_and_restore_values_follow_the_stock_rule(value: str, paused: str, restored: str) -> None:
    assert paused_value(value) == paused
    assert restored_value(paused) == restored


def test_a_mig_manager_pause_survives_a_driver_restart() -> None:
    # NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go @bd7160f4 (maybeSetPaused, maybeSetTrue): the MIG
    # manager sets the operand labels it stops to "paused-for-mig-change" and later back to "true". A driver
    # pod restarting meanwhile must hand that value back unchanged, never "true" under a running MIG change.
    mig = "paused-for-mig-change"
    labels = {"nvidia.com/gpu.deploy.device-plugin": mig, "nvidia.com/gpu.deploy.dcgm-exporter": "true"}
    paused = {**labels, **pause_patch(labels)}
    assert paused["nvidia.com/gpu.deploy.device-plugin"] == f"{mig}_{PAUSED}"
    assert {**paused, **restore_patch(paused)} == labels


def test_pause_patch_touches_only_operand_labels_that_change() -> None:
    assert pause_patch(OPERAND_LABELS) == {
        "nvidia.com/gpu.deploy.device-plugin": PAUSED,
        "nvidia.com/gpu.deploy.container-toolkit": f"custom_{PAUSED}",
    }
    paused = {**OPERAND_LABELS, **pause_patch(OPERAND_LABELS)}
    assert restore_patch(paused) == {
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.container-toolkit": "custom",
    }


def test_operand_selector_is_one_set_based_selector() -> None:
    selector = operand_selector()
    assert selector.startswith("app in (") and "nvidia-device-plugin-daemonset" in selector
    assert "gpu-feature-discovery" in selector and "None" not in selector


def test_mountinfo_points_are_unescaped_and_matched_by_component() -> None:
    text = (
        "36 35 98:0 / /run/nvidia rw - tmpfs tmpfs rw\n"
        "37 36 98:0 / /run/nvidia/driver rw - overlay overlay rw\n"
        "38 37 98:0 / /run/nvidia/driver/my\\040dir rw - tmpfs tmpfs rw\n"
        "39 36 98:0 / /run/nvidia/driver-old rw - tmpfs tmpfs rw\n"
    )
    assert mounts_at_or_below(text, "/run/nvidia/driver/") == ("/run/nvidia/driver", "/run/nvidia/driver/my dir")


# -- reading fixture nodes ------------------------------------------------------------------------


@pytest.mark.parametrize("node", ["talos-stale-mount"], indirect=True)
def test_facts_of_a_talos_node_with_leftovers(node: Node) -> None:
    facts = gather_facts(node.paths, Settings())
    assert (facts.platform, facts.talos_version) == ("talos", "v1.13.9")
    assert (facts.nvidia_loaded, facts.nvidia_version, facts.image_version) == (True, "595.91.07", "595.91.07")
    run = node.paths.run_dir
    assert facts.driver_mounts == (f"{run}/driver", f"{run}/driver/proc")
    assert facts.pid_file_stale and facts.host_smi is None and facts.state_digest is None


@pytest.mark.parametrize("node", ["talos-host-userspace"], indirect=True)
def test_host_nvidia_smi_is_found_through_an_absolute_link_inside_the_host_root(node: Node) -> None:
    assert gather_facts(node.paths, Settings()).host_smi == PurePosixPath("/usr/bin/nvidia-smi")
    (node.root / "host/usr/local/bin/nvidia-smi").chmod(0o644)  # not executable: the validator ignores it
    assert gather_facts(node.paths, Settings()).host_smi is None


@pytest.mark.parametrize("node", ["talos-stale-mount"], indirect=True)
def test_a_pid_file_of_a_live_process_is_not_stale(node: Node) -> None:
    (node.root / "proc/999999").mkdir()
    assert not gather_facts(node.paths, Settings()).pid_file_stale


@pytest.mark.parametrize("node", ["talos-stale-mount"], indirect=True)
@pytest.mark.parametrize("target", ["/dev/zero", "../../../../../../dev/zero"])
def test_a_pid_file_linked_to_dev_zero_is_stale_and_never_read_through(node: Node, target: str) -> None:
    """The pid file was once read through a symlink without a limit (MemoryError)."""
    pid_file = node.paths.pid_file
    pid_file.unlink()
    pid_file.symlink_to(target)
    assert gather_facts(node.paths, Settings()).pid_file_stale
    assert pid_file.is_symlink()  # gather_facts only reads; clean_leftovers removes the name


@pytest.mark.parametrize("node", ["talos-stale-mount"], indirect=True)
def test_a_huge_or_unicode_pid_file_is_stale_not_a_crash(node: Node) -> None:
    pid_file = node.paths.pid_file
    (node.root / "proc/2").mkdir()
    pid_file.write_text("²\n")
    assert gather_facts(node.paths, Settings()).pid_file_stale
    pid_file.write_text("2" * (1 << 20))
    assert not gather_facts(node.paths, Settings()).pid_file_stale  # over the limit: unreadable, left alone


# -- the command ----------------------------------------------------------------------------------


def _run(node: Node, api: FakeApi, options: ManagerOptions = OPTIONS, **kw: object) -> str:
    return run_uninstall(node.paths, Settings(), options, runner=node.runner, api_factory=lambda: api, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("node", ["ubuntu-loaded"], indirect=True)
def test_non_talos_node_defers_to_the_stock_manager_without_touching_anything(node: Node) -> None:
    def no_api() -> FakeApi:
        raise AssertionError("the API must not be used on a generic node")

    summary = run_uninstall(node.paths, Settings(), OPTIONS, runner=node.runner, api_factory=no_api)
    assert "stock k8s-driver-manager applies" in summary
    assert node.umount_calls() == []


@pytest.mark.parametrize("node", ["talos-host-userspace"], indirect=True)
def test_host_userspace_labels_pre_installed_waits_and_fails(node: Node) -> None:
    api = FakeApi(labels=dict(OPERAND_LABELS))
    slept: list[float] = []
    options = ManagerOptions(node_name="gpu-1", host_driver_delay=60.0)
    with pytest.raises(HostDriverPresentError) as caught:
        _run(node, api, options, sleep=slept.append)
    assert api.labels["nvidia.com/gpu.deploy.driver"] == "pre-installed"
    assert slept == [60.0]
    assert caught.value.exit_code != 0
    assert "/usr/bin/nvidia-smi" in caught.value.message and "kmod extension" in (caught.value.fix or "")
    assert caught.value.path == "/usr/bin/nvidia-smi"


@pytest.mark.parametrize("node", ["talos-host-userspace"], indirect=True)
def test_pre_installed_names_the_command_that_gives_the_node_back(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    """The label outlives the userspace extension (gpu-operator sets only missing deploy labels, and no pod
    of ours runs on the node again): the warning and the error both name the one command that undoes it."""
    command = "kubectl label node gpu-1 nvidia.com/gpu.deploy.driver=true --overwrite"
    with caplog.at_level("WARNING"), pytest.raises(HostDriverPresentError) as caught:
        _run(node, FakeApi(labels=dict(OPERAND_LABELS)), sleep=lambda _: None)
    assert f"then run `{command}`" in (caught.value.fix or "")
    assert any(command in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)
    with pytest.raises(HostDriverPresentError) as preflight:
        run_preflight(node.paths, Settings())  # no API, no node name: the command with a placeholder
    assert "kubectl label node <node> nvidia.com/gpu.deploy.driver=true --overwrite" in (preflight.value.fix or "")


@pytest.mark.parametrize("node", ["talos-version-mismatch"], indirect=True)
def test_a_manager_image_of_another_version_does_not_refuse(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    """The manager is version-agnostic (NVIDIA's k8s-driver-manager reads no driver version): a
    driver.manager.version that lags driver.version must not stop the node in the init container. The
    loaded 580.178.04 against this image's 595.91.07 is a note whose fix names both settings."""
    api = FakeApi(labels=dict(OPERAND_LABELS))
    with caplog.at_level("INFO"):
        summary = _run(node, api)
    assert "nvidia 580.178.04 loaded" in summary
    note = next(r.getMessage() for r in caplog.records if "this manager image ships 595.91.07" in r.getMessage())
    assert "driver.version=580.178.04 and driver.manager.version=580.178.04" in note
    assert "580.178.04-talosv1.13.9" in note


@pytest.mark.parametrize("node", ["talos-version-mismatch"], indirect=True)
def test_the_loaded_version_is_read_as_init_reads_it(node: Node) -> None:
    """Without /sys/module/nvidia/version the running module's /proc/driver/nvidia/version names it, for
    driver-manager as for init's VERSION_MISMATCH finding (findings.loaded_version_of): one rule."""
    (node.root / "sys/module/nvidia/version").unlink()
    proc = node.root / "proc/driver/nvidia"
    proc.mkdir(parents=True)
    (proc / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.178.04  Release Build  "
        "(dvs-builder@U16-I1-N07-12-3)  Wed Oct 29 23:50:55 UTC 2025\n"
    )
    assert gather_facts(node.paths, Settings()).nvidia_version == "580.178.04"
    assert any(
        "loaded nvidia 580.178.04, this manager image ships 595.91.07" in line
        for line in run_preflight(node.paths, Settings())
    )


@pytest.mark.parametrize("node", ["talos-stale-mount"], indirect=True)
@pytest.mark.parametrize("command", ["uninstall_driver", "preflight_check"])
def test_the_manager_reads_each_host_fact_once(node: Node, command: str) -> None:
    """Its facts are the inspect layer's HostState (gather_facts used to read the platform, the modules
    and the userspace again beside inspect_host): os-release, /proc/modules and the version file once."""
    watched = ("os-release", "proc/modules", "sys/module/nvidia/version", "libcuda.so")
    with opened_paths() as seen:
        if command == "uninstall_driver":
            _run(node, FakeApi(labels=dict(OPERAND_LABELS)))
        else:
            run_preflight(node.paths, Settings())
    counts = {w: sum(w in p for p in seen) for w in watched}
    assert counts == dict.fromkeys(watched, 1), counts


@pytest.mark.parametrize("node", ["talos-stale-mount"], indirect=True)
def test_digest_change_pauses_operands_cleans_and_restores(node: Node) -> None:
    api = FakeApi(labels=dict(OPERAND_LABELS), pods=["nvidia-device-plugin-daemonset-x"])
    summary = _run(node, api)
    patches = [c[1] for c in api.calls if c[0] == "patch"]
    assert patches == [
        {"nvidia.com/gpu.deploy.device-plugin": PAUSED, "nvidia.com/gpu.deploy.container-toolkit": f"custom_{PAUSED}"},
        {"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.container-toolkit": "custom"},
    ]
    kinds = [c[0] for c in api.calls]
    assert kinds.index("wait") > kinds.index("patch")
    assert api.labels == OPERAND_LABELS
    assert node.umount_calls() == [f"umount -l -R {node.paths.driver_root}"]
    assert not node.paths.pid_file.exists()
    assert "paused 2 operand label(s)" in summary


@pytest.mark.parametrize("node", ["talos-kmod-only-loaded"], indirect=True)
def test_unchanged_digest_pauses_nothing(node: Node) -> None:
    (node.paths.state_file).write_text("digest-new\n")
    api = FakeApi(labels=dict(OPERAND_LABELS), pods=["nvidia-device-plugin-daemonset-x"])
    summary = _run(node, api)
    assert [c for c in api.calls if c[0] in ("patch", "wait", "list")] == []
    assert "nothing to clean" in summary and node.umount_calls() == []


@pytest.mark.parametrize("node", ["talos-kmod-only-loaded"], indirect=True)
def test_labels_left_paused_by_an_interrupted_run_are_restored(node: Node) -> None:
    (node.paths.state_file).write_text("digest-new\n")
    api = FakeApi(labels={**OPERAND_LABELS, "nvidia.com/gpu.deploy.device-plugin": PAUSED})
    _run(node, api)
    assert api.labels["nvidia.com/gpu.deploy.device-plugin"] == "true"


@pytest.mark.parametrize("node", ["talos-not-loaded"], indirect=True)
def test_not_loaded_removes_the_stale_pid_file_and_never_unloads(node: Node) -> None:
    api = FakeApi(labels=dict(OPERAND_LABELS), pods=["x"])
    summary = _run(node, api)
    assert not node.paths.pid_file.exists()
    assert "nvidia not loaded yet" in summary
    assert [c for c in api.calls if c[0] in ("patch", "wait")] == []


@pytest.mark.parametrize("node", ["talos-stale-mount"], indirect=True)
def test_labels_are_restored_when_waiting_fails(node: Node) -> None:
    class Stuck(FakeApi):
        def wait_for_pods_gone(self, *args: object, **kwargs: object) -> None:
            raise TimeoutError("still there")

    api = Stuck(labels=dict(OPERAND_LABELS), pods=["p"])
    with pytest.raises(TimeoutError):
        _run(node, api)
    assert api.labels == OPERAND_LABELS
    assert node.umount_calls() == []  # nothing torn down while operands may still use the root


@pytest.mark.parametrize("node", ["talos-stale-mount"], indirect=True)
def test_module_tools_are_forbidden_on_talos(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    from driver_container.manager import manager

    seen: list[frozenset[str]] = []
    real = manager.clean_leftovers

    def spy(paths: HostPaths, facts: NodeFacts, runner: Runner) -> list[str]:
        seen.append(runner.forbidden)
        with pytest.raises(ForbiddenCommandError):
            runner.run(["rmmod", "nvidia"])
        return real(paths, facts, runner)

    monkeypatch.setattr(manager, "clean_leftovers", spy)
    _run(node, FakeApi(labels=dict(OPERAND_LABELS)))
    assert seen and seen[0] >= MODULE_TOOLS
