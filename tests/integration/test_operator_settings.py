"""Every gpu-operator v26.7.0 setting that changes the driver pod, run as far as a CPU allows on Talos, through the
operator's own code (docs/operator.md, "Settings on Talos": that table is this module's ``CASES``, kept equal by
``test_the_docs_table_is_what_these_tests_prove``).

For each setting: the shipped Helm values become a ClusterPolicy (helpers.operator_render), the setting is added,
and NVIDIA's ``render-driver`` writes the driver DaemonSet and its startup-probe ConfigMap for a Talos node. Then
``nvidia-driver init --no-wait`` runs with the rendered driver container's environment on the re-stamped Talos
host (with what Talos's machine config loads there), and the outcome is exactly one of:

- **works**: ``init`` goes Ready; the rendered startup-probe script runs for real and writes ``.driver-ctr-ready``;
  NVIDIA's real validator (``--component driver``) then writes ``driver-ready`` against the published root, i.e.
  passes everything but the GPU itself. There is no GPU here: ``nvidia-smi`` is a STAND-IN that exits 0
  (helpers.operator_validator says so in its output), so the validator goes on to the flags and their modules.
- **refused**: ``init`` exits 1 before Ready with the error finding, whose message and fix name the setting and
  the value to use (the Node Event carries both: test_node_report.py); and, to show why, the probe plus the
  validator with the same environment stall (the validator waits for the module forever).
- **no effect**: ``init`` goes Ready and the validator passes; the setting changes nothing on Talos (docs).
- **rejected by the operator**: the operator's own code refuses to render it for a Talos node (its error is
  in the ClusterPolicy's status, not on the node).
- **not supported**: rendered, but what it renders cannot run (an image tag nobody publishes); docs say so.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.fakes import node_env
from helpers.operator_render import (
    PLACEHOLDER_REGISTRY,
    Rendered,
    ValueFrom,
    clusterpolicy_from_values,
    render,
    talos_node,
)
from helpers.operator_validator import NodeFiles, OperatorApi, operator_api, run_driver_validator, run_startup_probe
from helpers.published_roots import CLI, GRAPHICS, Published, Userspace
from helpers.support import REPO

pytestmark = [pytest.mark.artefact, pytest.mark.root]

USERSPACE: Userspace = GRAPHICS[0]  # Debian's 535.309.01 graphics tree, the image's own route
OWNER = "ghcr.io/example"
TALOS_MODULES = ("nvidia_uvm", "nvidia_modeset", "nvidia")  # what the kmod extension's machine config loads
VALUES = REPO / "docs/deploy/gpu-operator-values.yaml"
DOC = REPO / "docs/operator.md"
KMOD_CONFIG = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "kernel-module-params"},
    "data": {"nvidia.conf": "NVreg_NoSuchParameter=1\n", "nvidia-uvm.conf": "uvm_perf_prefetch_enable=0\n"},
}
WORKS, REFUSED, NO_EFFECT, OPERATOR, UNSUPPORTED = (
    "works",
    "refused",
    "no effect",
    "rejected by the operator",
    "not supported",
)


@dataclass(frozen=True)
class Case:
    setting: str  # as docs/operator.md names it (ClusterPolicy path; NVIDIADriver: spec.<the same>)
    spec: dict[str, Any]  # merged into the ClusterPolicy's spec
    outcome: str
    talos: str = "v1.13.9"
    loaded: tuple[str, ...] = ()  # besides TALOS_MODULES: what the machine config loads
    code: str | None = None  # the refusal's finding
    fix: str | None = None  # what the refusal's fix must say
    objects: tuple[dict[str, Any], ...] = ()
    checks: tuple[Callable[[Rendered, subprocess.CompletedProcess[str]], None], ...] = field(default=())


def _kmod_config_is_checked_not_applied(rendered: Rendered, init: subprocess.CompletedProcess[str]) -> None:
    assert "UNKNOWN_PARAMETER: nvidia has no parameter NVreg_NoSuchParameter" in init.stderr
    assert "on Talos that ConfigMap is never applied" in init.stderr


def _host_root_is_the_hosts_path(rendered: Rendered, init: subprocess.CompletedProcess[str]) -> None:
    ds = rendered.daemonsets[0]
    manager = Rendered.container(ds, "k8s-driver-manager")
    assert Rendered.env_of(manager)["HOST_ROOT"] == "/custom"  # transformForHostRoot: the host's path
    assert [m.source for m in Rendered.mounts_of(manager, ds) if m.mount_path == "/host"] == ["/custom"]


def _precompiled_tag(rendered: Rendered, init: subprocess.CompletedProcess[str]) -> None:
    image = Rendered.container(rendered.daemonsets[0], "nvidia-driver-ctr")["image"]
    tag = r"(production|\d+\.\d+\.\d+)-6\.18\.44-talos-talosv1\.13\.9"  # the samples' channel, or a driver
    assert re.fullmatch(rf"{OWNER}/talos-nvidia-driver:{tag}", image), image


def _manager_env_reaches_the_init_container(rendered: Rendered, init: subprocess.CompletedProcess[str]) -> None:
    manager = Rendered.container(rendered.daemonsets[0], "k8s-driver-manager")
    assert Rendered.env_of(manager)["NODE_LABEL_FOR_GPU_POD_EVICTION"] == "example.com/gpu-job"


CASES = (
    Case(
        "driver.rdma.enabled",
        {"driver": {"rdma": {"enabled": True}}},
        REFUSED,
        code="PEERMEM_NOT_ON_TALOS",
        fix="set driver.rdma.enabled=false",
    ),
    Case(
        "driver.rdma.useHostMofed",
        {"driver": {"rdma": {"enabled": True, "useHostMofed": True}}},
        REFUSED,
        code="PEERMEM_NOT_ON_TALOS",
        fix="set driver.rdma.enabled=false",
    ),
    Case(
        "gds.enabled (Talos 1.13)",
        {"gds": {"enabled": True}},
        REFUSED,
        code="GDS_MODULE_NOT_LOADED",
        fix="set gds.enabled=false",
    ),
    Case(
        "gds.enabled (Talos 1.14, nvidia_fs loaded)",
        {"gds": {"enabled": True}},
        WORKS,
        talos="v1.14.0-rc.1",
        loaded=("nvidia_fs",),
    ),
    Case(
        "gdrcopy.enabled",
        {"gdrcopy": {"enabled": True}},
        REFUSED,
        code="GDRCOPY_MODULE_NOT_LOADED",
        fix="set gdrcopy.enabled=false",
    ),
    Case("gdrcopy.enabled (gdrdrv loaded)", {"gdrcopy": {"enabled": True}}, WORKS, loaded=("gdrdrv",)),
    Case(
        "driver.kernelModuleConfig",
        {"driver": {"kernelModuleConfig": {"name": "kernel-module-params"}}},
        NO_EFFECT,
        objects=(KMOD_CONFIG,),
        checks=(_kmod_config_is_checked_not_applied,),
    ),
    Case("driver.kernelModuleType", {"driver": {"kernelModuleType": "proprietary"}}, WORKS),
    Case("driver.usePrecompiled", {"driver": {"usePrecompiled": True}}, UNSUPPORTED, checks=(_precompiled_tag,)),
    Case("hostPaths.rootFS", {"hostPaths": {"rootFS": "/custom"}}, WORKS, checks=(_host_root_is_the_hosts_path,)),
    Case("driver.env", {"driver": {"env": [{"name": "NVIDIA_PERSISTENCED", "value": "false"}]}}, WORKS),
    Case("driver.args", {"driver": {"args": ["init", "--accept-license"]}}, NO_EFFECT),
    Case(
        "driver.licensingConfig",
        {"driver": {"licensingConfig": {"configMapName": "lic", "nlsEnabled": True}}},
        NO_EFFECT,
    ),
    Case("driver.virtualTopology", {"driver": {"virtualTopology": {"config": "topology"}}}, NO_EFFECT),
    Case("driver.repoConfig", {"driver": {"repoConfig": {"configMapName": "repo"}}}, OPERATOR),
    Case("driver.certConfig", {"driver": {"certConfig": {"name": "certs"}}}, OPERATOR),
    Case(
        "driver.startupProbe",
        {
            "driver": {
                "startupProbe": {
                    "initialDelaySeconds": 5,
                    "periodSeconds": 5,
                    "timeoutSeconds": 60,
                    "failureThreshold": 60,
                }
            }
        },
        WORKS,
    ),
    Case("driver.livenessProbe", {"driver": {"livenessProbe": {"periodSeconds": 20}}}, OPERATOR),
    Case("driver.readinessProbe", {"driver": {"readinessProbe": {"periodSeconds": 20}}}, OPERATOR),
    Case(
        "driver.manager.env",
        {"driver": {"manager": {"env": [{"name": "NODE_LABEL_FOR_GPU_POD_EVICTION", "value": "example.com/gpu-job"}]}}},
        WORKS,
        checks=(_manager_env_reaches_the_init_container,),
    ),
)


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def _clusterpolicy(case: Case) -> dict[str, Any]:
    values = yaml.safe_load(VALUES.read_text().replace(PLACEHOLDER_REGISTRY, OWNER))
    policy = clusterpolicy_from_values(values)
    _merge(policy["spec"], case.spec)
    return policy


def _literal_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment without the downward-API entries (NODE_NAME: no Node report here)."""
    return {k: v for k, v in Rendered.env_of(container).items() if not isinstance(v, ValueFrom)}


def _host(published: Published, work: Path, case: Case) -> Path:
    """A copy of the node init published on, as ``case`` has it: its Talos release and loaded modules."""
    source = Path(published.env["HOST_ROOT_MOUNT"]).parent
    host = Path(shutil.copytree(source, work / "node", symlinks=True))
    release = host / "host/etc/os-release"
    release.write_text(re.sub(r"v1\.\d+\.\d+[^\s\")]*", case.talos, release.read_text()))
    with (host / "proc/modules").open("a") as f:
        f.writelines(f"{name} 65536 0 - Live 0x0000000000000000 (O)\n" for name in case.loaded)
    return host


def _write_kmod_files(rendered: Rendered, host: Path, case: Case) -> None:
    """The kernelModuleConfig ConfigMap's keys at /drivers, as the rendered subPath mounts put them."""
    for obj in case.objects:
        for key, text in obj.get("data", {}).items():
            (host / "drivers").mkdir(exist_ok=True)
            (host / "drivers" / key).write_text(text)


@dataclass
class Ran:
    rendered: Rendered
    env: dict[str, str]
    init: subprocess.CompletedProcess[str]
    host: Path


@pytest.fixture
def api(tmp_path: Path) -> Iterator[OperatorApi]:
    with operator_api(tmp_path / "api") as served:
        yield served


def _run(case: Case, published: Published, work: Path) -> Ran:
    rendered = render(
        nodes=[talos_node("gpu-1", case.talos)],
        clusterpolicy=_clusterpolicy(case),
        objects=list(case.objects),
        tmp=work / "render",
    )
    ds = rendered.daemonsets[0]
    driver = Rendered.container(ds, "nvidia-driver-ctr")
    env = _literal_env(driver)
    host = _host(published, work, case)
    _write_kmod_files(rendered, host, case)
    command = [*driver.get("command", []), *driver.get("args", [])]
    assert command[0] == "nvidia-driver"
    argv = [str(CLI), *command[1:], *(["--no-wait"] if "init" in command else [])]
    cli_env = node_env(host, published.source, work / "run", published.env["PATH"]) | env
    init = subprocess.run(argv, env=cli_env, capture_output=True, text=True, timeout=300, check=False)
    return Ran(rendered, env, init, host)


def _validator_verdict(
    ran: Ran, published: Published, work: Path, api: OperatorApi, case: Case, timeout: float
) -> tuple[bool, str]:
    """The rendered probe script, then NVIDIA's validator against the published root: (passed, output)."""
    validations = work / "validations"
    validations.mkdir()
    node = NodeFiles.from_env(published.env)
    probe = run_startup_probe(
        ran.rendered.probe_script(),
        work=work / "probe",
        validations_dir=validations,
        sys_root=node.sys_root,
        env=ran.env,
    )
    assert probe.returncode == 0 and probe.ready is not None, probe.output
    run = run_driver_validator(
        work=work / "validator",
        driver_root=published.driver_root,
        validations_dir=validations,
        node=node,
        modules=(*TALOS_MODULES, *case.loaded),
        api=api,
        timeout=timeout,
    )
    return run.driver_ready is not None and not run.stalled, run.output


@pytest.mark.parametrize("case", [pytest.param(c, id=c.setting) for c in CASES])
def test_setting(
    case: Case, published_userspaces: Callable[[Userspace], Published], tmp_path: Path, api: OperatorApi
) -> None:
    if case.outcome == OPERATOR:
        with pytest.raises(RuntimeError, match=r"render-driver exit [12]"):
            render(nodes=[talos_node("gpu-1", case.talos)], clusterpolicy=_clusterpolicy(case), tmp=tmp_path)
        return
    published = published_userspaces(USERSPACE)
    ran = _run(case, published, tmp_path)
    for check in case.checks:
        check(ran.rendered, ran.init)
    if case.outcome == UNSUPPORTED:
        return
    if case.outcome == REFUSED:
        assert ran.init.returncode == 1, ran.init.stderr
        error, _, fix = ran.init.stderr.partition("nvidia-driver: fix: ")
        named = str(case.fix).removeprefix("set ").split("=")[0]  # the setting, e.g. driver.rdma.enabled
        assert f"{case.code}: {named}=true" in error and str(case.fix) in fix, ran.init.stderr
        assert (tmp_path / "run/validations/.driver-daemons-status").read_text() == "NotReady"  # the probe fails
        passed, output = _validator_verdict(ran, published, tmp_path, api, case, timeout=4.0)
        assert not passed, f"the validator passed although {case.setting} was refused:\n{output}"
        assert "command failed, retrying" in output  # it waits for the module, forever
        return
    assert ran.init.returncode == 0, ran.init.stderr
    assert "nvidia-driver: error" not in ran.init.stderr
    passed, output = _validator_verdict(ran, published, tmp_path, api, case, timeout=30.0)
    assert passed, output


def _doc_rows() -> dict[str, str]:
    section = DOC.read_text().split("## Settings on Talos", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)`(?: \(([^)]*)\))? \| \*\*([a-z ]+)\*\*", section, re.M)
    return {f"{name} ({detail})" if detail else name: outcome for name, detail, outcome in rows}


def test_the_docs_table_is_what_these_tests_prove() -> None:
    assert _doc_rows() == {c.setting: c.outcome for c in CASES}


def test_host_root_from_hostpaths_rootfs_is_the_hosts_path(
    published_userspaces: Callable[[Userspace], Published], tmp_path: Path
) -> None:
    """``hostPaths.rootFS: /custom``: the operator sets HOST_ROOT=/custom (the host's path) on the manager and
    mounts that path at /host; the manager reads the module files through the mount. It used to take
    HOST_ROOT as the path in the container, found nothing at /custom and checked nothing."""
    case = next(c for c in CASES if c.setting == "hostPaths.rootFS")
    published = published_userspaces(USERSPACE)
    rendered = render(
        nodes=[talos_node("gpu-1", case.talos)], clusterpolicy=_clusterpolicy(case), tmp=tmp_path / "render"
    )
    manager = Rendered.container(rendered.daemonsets[0], "k8s-driver-manager")
    assert manager["command"] == ["driver-manager"]
    env = _literal_env(manager)
    assert env["HOST_ROOT"] == "/custom"
    host = _host(published, tmp_path, case)  # what the host-root volume shows at /host
    cli_env = node_env(host, published.source, tmp_path / "run", published.env["PATH"]) | env
    done = subprocess.run(
        [str(CLI.parent / "driver-manager"), "preflight_check"],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if "module files match the loaded modules" in x]
    assert "nvidia.ko" in line and "none under" not in line, done.stdout
