"""The manifests in docs/deploy agree with the code: commands, env names, mounts, probes, module lists."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
from helpers.support import REPO, ROUTE_AND_REFERENCE_PAGES, require_module

from driver_container.base.paths import ENV_NAMES, HostPaths
from driver_container.cli import _register_commands, manager_cmd
from driver_container.cli.app import app as driver_app
from driver_container.settings import variables

yaml = require_module("yaml")  # PyYAML is in the test extra; the package itself never needs it

DEPLOY = REPO / "docs" / "deploy"
# Set by the container runtime or read by NVIDIA's tools inside the container, not by this project.
RUNTIME_ENV = {"NVIDIA_VISIBLE_DEVICES"}
# Always present in a (privileged) container: the image root, and its own /proc and /sys, which show
# the host's module state (modules and sysfs are not namespaced).
RUNTIME_MOUNTS = {"/", "/proc", "/sys"}
# The operator's defaults (deployments/gpu-operator/values.yaml driver.startupProbe at a22dbf67).
PROBE = {"initialDelaySeconds": 60, "periodSeconds": 10, "timeoutSeconds": 60, "failureThreshold": 120}


def _docs(name: str) -> list[Any]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d is not None]


def _commands(app: typer.Typer) -> Any:
    _register_commands()
    return typer.main.get_command(app)


def _envvars(command: Any) -> set[str]:
    names: set[str] = set()
    for cmd in [command, *getattr(command, "commands", {}).values()]:
        for param in cmd.params:
            env = param.envvar
            names.update([env] if isinstance(env, str) else env or [])
    return names


def known_env_names() -> set[str]:
    return (
        set(ENV_NAMES)
        | set(variables.names())
        | set(manager_cmd.ENV_NAMES)
        | _envvars(_commands(driver_app))
        | _envvars(_commands(manager_cmd.app))
    )


def _daemonset() -> dict[str, Any]:
    return next(d for d in _docs("standalone-daemonset.yaml") if d["kind"] == "DaemonSet")


def _driver_container() -> dict[str, Any]:
    pod = _daemonset()["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "nvidia-driver-ctr")


def test_known_env_names_are_really_collected() -> None:
    names = known_env_names()
    assert {"HOST_ROOT_MOUNT", "DRIVER_PLATFORM", "NODE_NAME", "LOG_FORMAT", "DRIVER_CONFIG_DIGEST"} <= names
    assert "NOT_A_SETTING" not in names


def test_commands_in_manifests_exist() -> None:
    driver_commands = set(_commands(driver_app).commands)
    manager_commands = set(_commands(manager_cmd.app).commands)
    command = _driver_container()["command"]
    assert command[0] == "nvidia-driver" and command[1] in driver_commands
    # The operator runs `driver-manager uninstall_driver` in its init container; our image must answer it.
    assert "uninstall_driver" in manager_commands
    assert "init" in driver_commands  # the operator's main container command


@pytest.mark.parametrize("name", ["standalone-daemonset.yaml", "gpu-operator-values.yaml", "nvidiadriver.yaml"])
def test_every_env_name_in_manifests_is_read_by_the_code(name: str) -> None:
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if set(node) >= {"name", "value"} or set(node) >= {"name", "valueFrom"}:
                found.append(str(node["name"]))
            for key, value in node.items():
                if key != "volumeMounts":
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for doc in _docs(name):
        # In the helm values only driver.* reaches our containers; toolkit.env belongs to NVIDIA's toolkit.
        walk(doc["driver"] if name == "gpu-operator-values.yaml" else doc.get("spec", doc))
    assert found, f"{name}: no env entries found (the walker is broken)"
    unknown = sorted(set(found) - known_env_names() - RUNTIME_ENV)
    assert unknown == [], f"{name}: env names no code reads: {unknown}"


def test_standalone_mounts_cover_every_path_the_code_reads() -> None:
    container = _driver_container()
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    paths = HostPaths.from_env(env)
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    needed = {
        "HOST_ROOT_MOUNT": paths.host_root,
        "PROCFS_ROOT": paths.procfs_root,
        "SYSFS_ROOT": paths.sysfs_root,
        "RUN_DIR": paths.run_dir,
        "USERSPACE_ROOT": paths.userspace_root,
        "DRIVERS_CONF_DIR": paths.drivers_conf_dir,
    }
    for name, path in needed.items():
        if str(path) in RUNTIME_MOUNTS:
            continue
        assert str(path) in mounts, f"{name}={path} is not mounted"
    assert mounts[str(paths.host_root)]["readOnly"] is True  # /host is only read (module files verified)
    assert mounts[str(paths.run_dir)]["mountPropagation"] == "Bidirectional"  # the operator's choice
    volumes = {v["name"]: v for v in _daemonset()["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts["/host"]["name"]]["hostPath"]["path"] == "/"
    assert volumes[mounts[str(paths.run_dir)]["name"]]["hostPath"]["path"] == "/run/nvidia"
    assert _daemonset()["spec"]["updateStrategy"]["type"] == "OnDelete"
    assert _daemonset()["spec"]["template"]["spec"]["hostPID"] is True  # pid file of persistenced, like the operator


def test_driver_install_dir_is_where_init_publishes() -> None:
    (values,) = _docs("gpu-operator-values.yaml")
    assert values["hostPaths"]["driverInstallDir"] == str(HostPaths().driver_root)


def test_manager_is_this_image_and_the_driver_image_follows_the_operator_tag_rule() -> None:
    (values,) = _docs("gpu-operator-values.yaml")
    (cr,) = _docs("nvidiadriver.yaml")
    for spec in (values["driver"], cr["spec"]):
        manager = spec["manager"]
        assert (manager["repository"], manager["image"]) == (spec["repository"], spec["image"])
        # The operator appends -<ID><VERSION_ID> to the driver tag but uses the manager tag as is: the
        # version-agnostic manager tag of the published image (scripts/release-matrix.py tags).
        assert (spec["version"], manager["version"]) == ("production", "manager")
        assert {e["name"] for e in spec["env"]} == {"DRIVER_PLATFORM"}
    assert cr["spec"]["repository"] == values["driver"]["repository"]


@pytest.mark.parametrize("where", ["values", "cr", "standalone"])
def test_startup_probe_timing_matches_the_operator(where: str) -> None:
    if where == "standalone":
        probe = _driver_container()["startupProbe"]
        assert probe["exec"]["command"] == ["sh", "/usr/local/bin/startup-probe.sh"]
    else:
        probe = _docs("gpu-operator-values.yaml")[0]["driver"] if where == "values" else _docs("nvidiadriver.yaml")[0]
        probe = probe["startupProbe"] if where == "values" else probe["spec"]["startupProbe"]
    assert {k: probe[k] for k in PROBE} == PROBE


def _probe_script() -> str:
    config = next(d for d in _docs("standalone-daemonset.yaml") if d["kind"] == "ConfigMap")
    return str(config["data"]["startup-probe.sh"])


def test_pre_stop_removes_both_status_files() -> None:
    command = _driver_container()["lifecycle"]["preStop"]["exec"]["command"]
    assert command == [
        "rm",
        "-f",
        "/run/nvidia/validations/.driver-ctr-ready",
        "/run/nvidia/validations/.driver-daemons-status",
    ]


def _run_probe(tmp_path: Path, *, loaded: bool, status: str | None, smi_rc: int) -> tuple[int, Path]:
    require_sh = shutil.which("sh")
    assert require_sh
    run, sysmod, bin_dir = tmp_path / "run/nvidia", tmp_path / "sys/module", tmp_path / "bin"
    (run / "validations").mkdir(parents=True)
    bin_dir.mkdir()
    if loaded:
        (sysmod / "nvidia").mkdir(parents=True)
        (sysmod / "nvidia/refcnt").write_text("3\n")
    if status is not None:
        (run / "validations/.driver-daemons-status").write_text(status)
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nexit {smi_rc}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    script = tmp_path / "probe.sh"
    script.write_text(_probe_script().replace("/run/nvidia", str(run)).replace("/sys/module", str(sysmod)))
    env = {"PATH": f"{bin_dir}:{os.defpath}", "GDS_ENABLED": "true"}
    rc = subprocess.run(["sh", str(script)], env=env, capture_output=True, check=False).returncode
    return rc, run / "validations/.driver-ctr-ready"


@pytest.mark.parametrize(
    ("loaded", "status", "smi_rc", "ok"),
    [
        (True, None, 0, True),
        (True, "Ready", 0, True),
        (True, "NotReady", 0, False),
        (False, None, 0, False),
        (True, None, 9, False),
    ],
)
def test_startup_probe_script_behaves_like_the_operators(
    tmp_path: Path, loaded: bool, status: str | None, smi_rc: int, ok: bool
) -> None:
    rc, ready = _run_probe(tmp_path, loaded=loaded, status=status, smi_rc=smi_rc)
    assert (rc == 0) == ok and ready.exists() == ok
    if ok:
        assert yaml.safe_load(ready.read_text()) == {
            "GDRCOPY_ENABLED": False,
            "GDS_ENABLED": True,
            "GPU_DIRECT_RDMA_ENABLED": False,
        }


def test_talos_module_lists_agree_in_both_forms() -> None:
    (legacy,) = _docs("talos-machine-config.yaml")
    modern = _docs("talos-kernel-module-config.yaml")
    old = {m["name"]: m.get("parameters", []) for m in legacy["machine"]["kernel"]["modules"]}
    new = {d["name"]: d.get("parameters", []) for d in modern}
    assert {d["kind"] for d in modern} == {"KernelModuleConfig"}
    assert old == new
    assert set(old) == {"nvidia", "nvidia_uvm", "nvidia_modeset"}  # underscores, as machined and sysfs spell them
    assert all("=" in p for params in old.values() for p in params)


# -- against gpu-operator's chart and CRDs --------------------------------------------------------
# Verified by reading NVIDIA/gpu-operator at a22dbf671f2e26f9a1e342f8eea28e196235e110 (v26.7.0+3):
# deployments/gpu-operator/values.yaml (chart keys) and crds/nvidia.com_nvidiadrivers.yaml (v1alpha1
# spec properties). Only the keys these manifests may use; every one also exists in v26.3.3 (b0a49c0e).
OPERATOR_COMMIT = "a22dbf671f2e26f9a1e342f8eea28e196235e110"
CHART_KEYS = frozenset(
    {
        "psa.enabled",
        "cdi.enabled",
        "cdi.nriPluginEnabled",
        "hostPaths.rootFS",
        "hostPaths.driverInstallDir",
        "driver.enabled",
        "driver.nvidiaDriverCRD.enabled",
        "driver.nvidiaDriverCRD.deployDefaultCR",
        "driver.nvidiaDriverCRD.driverType",
        "driver.nvidiaDriverCRD.nodeSelector",
        "driver.kernelModuleType",
        "driver.usePrecompiled",
        "driver.repository",
        "driver.image",
        "driver.version",
        "driver.imagePullPolicy",
        "driver.imagePullSecrets",
        "driver.startupProbe.initialDelaySeconds",
        "driver.startupProbe.periodSeconds",
        "driver.startupProbe.timeoutSeconds",
        "driver.startupProbe.failureThreshold",
        "driver.rdma.enabled",
        "driver.rdma.useHostMofed",
        "driver.upgradePolicy.autoUpgrade",
        "driver.upgradePolicy.maxParallelUpgrades",
        "driver.upgradePolicy.maxUnavailable",
        "driver.manager.repository",
        "driver.manager.image",
        "driver.manager.version",
        "driver.manager.imagePullPolicy",
        "driver.manager.env",
        "driver.env",
        "driver.resources",
        "driver.kernelModuleConfig.name",
        "driver.secretEnv",
        "driver.hostNetwork",
        "toolkit.enabled",
        "toolkit.repository",
        "toolkit.image",
        "toolkit.version",
        "toolkit.env",
        "toolkit.installDir",
        "toolkit.resources",
        "mig.strategy",
        "migManager.enabled",
        "migManager.env",
        "migManager.version",
        "migManager.config.name",
        "migManager.config.default",
        "migManager.config.create",
    }
)
NVIDIADRIVER_SPEC_KEYS = frozenset(
    {
        "driverType",
        "repository",
        "image",
        "version",
        "usePrecompiled",
        "kernelModuleType",
        "nodeSelector",
        "manager.repository",
        "manager.image",
        "manager.version",
        "manager.env",
        "manager.imagePullPolicy",
        "env",
        "args",
        "startupProbe.initialDelaySeconds",
        "startupProbe.periodSeconds",
        "startupProbe.timeoutSeconds",
        "startupProbe.successThreshold",
        "startupProbe.failureThreshold",
        "tolerations",
        "priorityClassName",
        "kernelModuleConfig.name",
        "rdma.enabled",
        "rdma.useHostMofed",
        "resources",
        "upgradePolicy.autoUpgrade",
    }
)
MAP_KEYS = {"nodeSelector", "driver.nvidiaDriverCRD.nodeSelector", "resources", "driver.resources"}  # free-form
# The driver ClusterRole the operator binds to the driver pod's service account (assets/state-driver/
# 0210_clusterrole.yaml = manifests/state-driver/0210_clusterrole.yaml at a22dbf67), core group only.
OPERATOR_DRIVER_RBAC = {
    "nodes": {"get", "list", "patch", "update", "watch"},
    "pods": {"get", "list", "watch"},
    "pods/eviction": {"create"},
}
# What this image calls: driver-manager (kube.KubeClient) and init's node report (nodereport.py).
MANAGER_NEEDS = {"nodes": {"get", "patch"}, "pods": {"list"}, "pods/eviction": {"create"}}
NODE_REPORT_NEEDS = {"nodes": {"patch"}, "events": {"create"}}


def _leaves(node: object, prefix: str = "") -> set[str]:
    if not isinstance(node, dict) or not node or prefix in MAP_KEYS:
        return {prefix}
    out: set[str] = set()
    for key, value in node.items():
        out |= _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    return out


def test_values_use_only_keys_of_the_chart() -> None:
    (values,) = _docs("gpu-operator-values.yaml")
    unknown = sorted(_leaves(values) - CHART_KEYS)
    assert unknown == [], f"not keys of gpu-operator's chart at {OPERATOR_COMMIT}: {unknown}"


def test_nvidiadriver_uses_only_fields_of_the_crd() -> None:
    (cr,) = _docs("nvidiadriver.yaml")
    assert (cr["apiVersion"], cr["kind"]) == ("nvidia.com/v1alpha1", "NVIDIADriver")
    unknown = sorted(_leaves(cr["spec"]) - NVIDIADRIVER_SPEC_KEYS)
    assert unknown == [], f"not NVIDIADriver spec fields at {OPERATOR_COMMIT}: {unknown}"


def test_nvidiadriver_states_its_upgrade_policy() -> None:
    # Since v26.7.0 (gpu-operator 172ef9bbf) the upgrade controller reads each NVIDIADriver's own
    # spec.upgradePolicy, and a missing one means autoUpgrade: true (GetUpgradePolicyWithDefaults in
    # api/nvidia/v1alpha1/nvidiadriver_types.go, controllers/upgrade_controller.go at a22dbf67): node drains
    # and driver pod restarts before the node runs the new kmod extension (docs/upgrades.md).
    (cr,) = _docs("nvidiadriver.yaml")
    assert cr["spec"]["upgradePolicy"]["autoUpgrade"] is False


def test_the_leaf_walker_sees_nested_keys() -> None:
    assert _leaves({"a": {"b": 1, "nodeSelector": {"x.y/z": "1"}}, "nodeSelector": {"k": "v"}}) == {
        "a.b",
        "a.nodeSelector.x.y/z",
        "nodeSelector",
    }


def test_values_wire_the_toolkit_for_talos() -> None:
    (values,) = _docs("gpu-operator-values.yaml")
    assert values["psa"]["enabled"] is True  # Talos enforces baseline outside kube-system
    assert values["cdi"] == {"enabled": True, "nriPluginEnabled": True}  # no runtimeClass, no conf.d mount
    assert str(values["toolkit"]["installDir"]).startswith("/var/")  # /usr and /etc are read-only
    env = {e["name"]: e["value"] for e in values["toolkit"]["env"]}
    assert env.get("RUNTIME_RESTART_MODE") == "none"  # the installer's variable (toolkit v1.20.0)
    assert not {"CONTAINERD_RESTART_MODE", "CONTAINERD_CONFIG"} & set(env)  # not read / not needed in NRI mode
    assert values["driver"]["upgradePolicy"]["autoUpgrade"] is False
    assert values["hostPaths"]["driverInstallDir"] == "/run/nvidia/driver"


@pytest.mark.parametrize("where", ["values", "cr"])
def test_probe_timeout_is_stated_and_long_enough_for_nvidia_smi(where: str) -> None:
    values, cr = _docs("gpu-operator-values.yaml")[0], _docs("nvidiadriver.yaml")[0]
    spec = values["driver"] if where == "values" else cr["spec"]
    probe = spec["startupProbe"]
    # The NVIDIADriver path renders each field as given: a missing timeoutSeconds is 0, i.e. 1 s.
    assert probe["timeoutSeconds"] >= 30
    if where == "cr":
        assert set(probe) == {*PROBE, "successThreshold"} and probe["successThreshold"] == 1


def _all_yaml_documents() -> list[tuple[str, Any]]:
    docs = [(p.name, d) for p in sorted(DEPLOY.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())]
    for md in ROUTE_AND_REFERENCE_PAGES:
        blocks = re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / md).read_text(), re.S)
        docs += [(md, d) for block in blocks for d in yaml.safe_load_all(block)]
    return [(name, d) for name, d in docs if d is not None]


def test_every_manifest_and_doc_snippet_parses() -> None:
    names = {name for name, _ in _all_yaml_documents()}
    assert {p.name for p in DEPLOY.glob("*.yaml")} <= names
    assert {"operator.md"} <= names  # the walk-through's snippets are checked too


def test_every_namespace_created_is_privileged() -> None:
    namespaces = [(n, d) for n, d in _all_yaml_documents() if isinstance(d, dict) and d.get("kind") == "Namespace"]
    assert any(n == "standalone-daemonset.yaml" for n, _ in namespaces)
    for name, doc in namespaces:
        assert doc["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged", name


def test_every_helm_install_that_creates_the_namespace_labels_it() -> None:
    found = 0
    for md in ROUTE_AND_REFERENCE_PAGES:
        text = (REPO / "docs" / md).read_text().replace("\\\n", " ")
        for line in text.splitlines():
            if "helm install" in line and "--create-namespace" in line:
                found += 1
                assert "psa.enabled=true" in line or "gpu-operator-values.yaml" in line, f"{md}: {line}"
                assert "psa.enabled=false" not in line
    assert _docs("gpu-operator-values.yaml")[0]["psa"]["enabled"] is True  # what the -f lines rely on
    assert found >= 2


def test_talos_113_nri_patch_enables_containerds_nri_plugin() -> None:
    (patch,) = _docs("talos-nri-1.13.yaml")
    (entry,) = patch["machine"]["files"]
    assert (entry["path"], entry["op"]) == ("/etc/cri/conf.d/20-customization.part", "create")
    lines = [line.strip() for line in entry["content"].splitlines()]
    assert '[plugins."io.containerd.nri.v1.nri"]' in lines and "disable = false" in lines


def _rbac(rules: list[dict[str, Any]]) -> dict[str, set[str]]:
    granted: dict[str, set[str]] = {}
    for rule in rules:
        if "" in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault(resource, set()).update(rule["verbs"])
    return granted


def _covers(granted: dict[str, set[str]], needed: dict[str, set[str]]) -> bool:
    return all(verbs <= granted.get(resource, set()) for resource, verbs in needed.items())


def test_rbac_of_the_operator_and_of_the_standalone_manifest() -> None:
    assert _covers(OPERATOR_DRIVER_RBAC, MANAGER_NEEDS)
    # docs/operator.md says so: the operator's role lets init annotate the Node but not post Events.
    assert _covers(OPERATOR_DRIVER_RBAC, {"nodes": {"patch"}}) and not _covers(OPERATOR_DRIVER_RBAC, NODE_REPORT_NEEDS)
    role = next(d for d in _docs("standalone-daemonset.yaml") if d["kind"] == "ClusterRole")
    assert _covers(_rbac(role["rules"]), NODE_REPORT_NEEDS)
    binding = next(d for d in _docs("standalone-daemonset.yaml") if d["kind"] == "ClusterRoleBinding")
    account = _daemonset()["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "gpu-operator"}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


# NVIDIA/gpu-operator a22dbf67: the MIG manager's entrypoint (assets/state-mig-manager/0420_configmap.yaml)
# overwrites WITH_SHUTDOWN_HOST_GPU_CLIENTS with IS_HOST_DRIVER; NVIDIA/mig-parted @bd7160f4
# cmd/nvidia-mig-manager/main.go reads WITH_REBOOT (default false) and the rest from driver-ready.
MIG_MANAGER_ENV_READ = {"WITH_REBOOT", "GPU_CLIENTS_FILE", "CDI_ENABLED", "NVIDIA_CDI_HOOK_PATH", "CONFIG_FILE"}
MIG_MANAGER_ENV_OVERWRITTEN = {"WITH_SHUTDOWN_HOST_GPU_CLIENTS"}


def test_values_configure_the_mig_manager_for_talos() -> None:
    (values,) = _docs("gpu-operator-values.yaml")
    assert values["mig"]["strategy"] in ("single", "mixed")  # deployments/gpu-operator/values.yaml choices
    env = {e["name"]: e["value"] for e in values["migManager"]["env"]}
    assert env["WITH_REBOOT"] == "false"  # no `chroot /host reboot` on Talos: talosctl reboot
    assert set(env) <= MIG_MANAGER_ENV_READ and not set(env) & MIG_MANAGER_ENV_OVERWRITTEN, env
