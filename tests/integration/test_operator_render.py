"""gpu-operator v26.7.0's own code renders the driver DaemonSets from the shipped samples (docs/operator.md).

``docs/deploy/gpu-operator-values.yaml`` (made into the ClusterPolicy the chart would create) and
``docs/deploy/nvidiadriver.yaml`` are rendered by the operator (tests/helpers/operator_render.py) for Talos
nodes on v1.13.9 and v1.14.0-rc.1: the NVIDIADriver once with one node of each release (two node pools),
the ClusterPolicy once per release (it takes one OS tag for the whole cluster). Variants of both switch on
what the samples leave off (RDMA with host MOFED, GDS, GDRCopy, ``hostPaths.rootFS: /custom``, a
``kernelModuleConfig`` ConfigMap, open modules), so that every env var and mount the operator can give the
driver pod is seen. Checked:

(a) every image of every DaemonSet is one the release matrix publishes (scripts/release-matrix.py ``tags``);
(b) the manager and driver images pair up: one repository, the driver tag the samples' channel plus
    ``-talos<the pool's VERSION_ID>`` and the manager tag ``manager`` (or one digest for both), and every
    node gets exactly one driver DaemonSet;
(c) docs/configuration.md "What the operator passes" lists exactly the env vars and mounts the renders give
    each container, and what it says holds: "read by" names a reader of this code that reads that name
    (paths.HOST_ROOTS, Settings, driver-manager's names, the node report, the CLI's options, the startup
    probe script) or, for a mount, a root whose path (in that container's env) is the mount or holds the
    file the code reads there; an ignored entry has a reason and no reader of that container reads it;
(d) the standalone manifest's startup probe behaves as the operator's real one.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

import pytest
import typer
import yaml
from helpers.operator_render import (
    OS_VERSION_LABEL,
    PLACEHOLDER_REGISTRY,
    PROBE_CONFIGMAP,
    Rendered,
    ValueFrom,
    clusterpolicy_from_values,
    containers_of,
    env_of,
    mounts_of,
    render,
    require_renderer,
    talos_node,
)
from helpers.release import release_matrix
from helpers.support import REPO

from driver_container.base.paths import HOST_ROOTS, OPERATOR_OS_RELEASE, HostPaths
from driver_container.cli import _register_commands, manager_cmd
from driver_container.cli.app import app as driver_app
from driver_container.formats.kernel.sysfs import FIRMWARE_PATH_PARAM as FIRMWARE_PARAM
from driver_container.formats.modconf import conf_file_name
from driver_container.formats.userspace_layout import IMAGE_FIRMWARE_DIRS
from driver_container.inspect.hoststate import NVIDIA_MODULES
from driver_container.report.environment import settings_env_names
from driver_container.settings import variables

pytestmark = pytest.mark.timeout(180)  # ~20 renders of ~0.6 s, run 8 at a time, once per module

DEPLOY = REPO / "docs" / "deploy"
DOC = REPO / "docs" / "configuration.md"
OWNER = "example"  # the samples' registry.invalid filled in as ghcr.io/example
IMAGE = f"ghcr.io/{OWNER}/talos-nvidia-driver"
RELEASES = ("v1.13.9", "v1.14.0-rc.1")
KMOD_CONFIG = {  # a kernelModuleConfig ConfigMap (docs/deploy/talos-kernel-module-config.yaml's keys)
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "kernel-module-params"},
    "data": {"nvidia.conf": "NVreg_EnableGpuFirmware=1\n", "nvidia-uvm.conf": "uvm_disable_hmm=1\n"},
}


def _with_owner(node: Any) -> Any:
    """The sample with its placeholder registry filled in, everywhere."""
    if isinstance(node, dict):
        return {k: _with_owner(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_with_owner(v) for v in node]
    return node.replace(PLACEHOLDER_REGISTRY, f"ghcr.io/{OWNER}") if isinstance(node, str) else node


def _values() -> dict[str, Any]:
    (values,) = [d for d in yaml.safe_load_all((DEPLOY / "gpu-operator-values.yaml").read_text()) if d]
    return dict(_with_owner(values))


def _nvidiadriver() -> dict[str, Any]:
    (cr,) = [d for d in yaml.safe_load_all((DEPLOY / "nvidiadriver.yaml").read_text()) if d]
    return dict(_with_owner(cr))


def _deep_set(doc: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    *parents, last = dotted.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return out


class Case(NamedTuple):
    """One render, named ``cp-*`` (ClusterPolicy path) or ``nd-*`` (NVIDIADriver path), and what it sets."""

    name: str
    releases: tuple[str, ...]
    values: dict[str, Any]  # helm values (the ClusterPolicy; for nd with driver.nvidiaDriverCRD.enabled)
    nvidiadriver: dict[str, Any] | None
    objects: tuple[dict[str, Any], ...] = ()


# What the samples leave off, switched on: (helm values key, value) for the ClusterPolicy, (NVIDIADriver
# spec key, value) for the NVIDIADriver (rootFS is the ClusterPolicy's there too).
# The sidecars run this image (docs/operator.md, "GDS and GDRCopy"): NVIDIA's would build and load a module.
SIDECAR = {
    name: {"enabled": True, "repository": "ghcr.io/example", "image": "talos-nvidia-driver", "version": "595.91.07"}
    for name in ("gds", "gdrcopy")
}
VARIANTS: dict[str, tuple[list[tuple[str, Any]], list[tuple[str, Any]]]] = {
    "rdma": (
        [("driver.rdma", {"enabled": True, "useHostMofed": True})],
        [("rdma", {"enabled": True, "useHostMofed": True})],
    ),
    "gds": ([("gds", SIDECAR["gds"])], [("gds", SIDECAR["gds"]), ("kernelModuleType", "open")]),
    "gdrcopy": ([("gdrcopy", SIDECAR["gdrcopy"])], [("gdrcopy", SIDECAR["gdrcopy"])]),
    "rootfs": ([("hostPaths.rootFS", "/custom")], []),
    "kmodcfg": (
        [("driver.kernelModuleConfig.name", "kernel-module-params")],
        [("kernelModuleConfig", {"name": "kernel-module-params"})],
    ),
    "open": ([("driver.kernelModuleType", "open")], [("kernelModuleType", "open")]),
}
# And all of them at once: the sidecars with the kernelModuleConfig mounts and HOST_ROOT.
VARIANTS["all"] = ([s for cp, _ in VARIANTS.values() for s in cp], [s for _, nd in VARIANTS.values() for s in nd])


def cases() -> list[Case]:
    values, cr = _values(), _nvidiadriver()
    # docs/deploy/nvidiadriver.yaml: the chart installed with driver.nvidiaDriverCRD.enabled=true.
    nd_values = _deep_set(values, "driver.nvidiaDriverCRD", {"enabled": True, "deployDefaultCR": False})
    out = [Case(f"cp-{r}", (r,), values, None) for r in RELEASES]
    out.append(Case("nd-pools", RELEASES, nd_values, cr))
    for name, (cp_sets, nd_sets) in VARIANTS.items():
        objects = (KMOD_CONFIG,) if name in ("kmodcfg", "all") else ()
        v = values
        for key, value in cp_sets:
            v = _deep_set(v, key, value)
        out.append(Case(f"cp-{name}", (RELEASES[0],), v, None, objects))
        nv, ncr = nd_values, cr
        for key, value in cp_sets:
            nv = _deep_set(nv, key, value) if key.startswith("hostPaths.") else nv
        for key, value in nd_sets:
            ncr = _deep_set(ncr, f"spec.{key}", value)
        out.append(Case(f"nd-{name}", (RELEASES[0],), nv, ncr, objects))
    return out


CASES = cases()
SAMPLES = ("cp-v1.13.9", "cp-v1.14.0-rc.1", "nd-pools")


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Rendered]:
    require_renderer()
    base = tmp_path_factory.mktemp("render")

    def one(case: Case) -> Rendered:
        nodes = [talos_node(f"talos-{r}", r) for r in case.releases]
        return render(
            nodes=nodes,
            clusterpolicy=clusterpolicy_from_values(case.values),
            nvidiadrivers=[case.nvidiadriver] if case.nvidiadriver else None,
            objects=case.objects,
            tmp=base / case.name,
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip([c.name for c in CASES], pool.map(one, CASES), strict=True))


def test_the_samples_render_without_warnings(renders: dict[str, Rendered]) -> None:
    for name, rendered in renders.items():
        assert rendered.warnings == (), f"{name}: {rendered.warnings}"  # an unknown field would be pruned
        assert rendered.daemonsets, name
    assert len(renders["nd-pools"].daemonsets) == 2
    assert [d["metadata"]["name"] for d in renders["cp-v1.13.9"].daemonsets] == ["nvidia-driver-daemonset"]


@pytest.mark.parametrize("name", SAMPLES)
def test_the_samples_settings_reach_the_containers_and_run_commands_of_this_image(
    renders: dict[str, Rendered], name: str
) -> None:
    values, cr = _values(), _nvidiadriver()
    probe = dict(values["driver"]["startupProbe"])
    assert probe.items() <= cr["spec"]["startupProbe"].items()  # the two samples agree
    _register_commands()
    commands: dict[str, Any] = {
        "nvidia-driver": typer.main.get_command(driver_app),
        "driver-manager": typer.main.get_command(manager_cmd.app),
    }
    for ds in renders[name].daemonsets:
        manager = Rendered.container(ds, "k8s-driver-manager")
        driver = Rendered.container(ds, "nvidia-driver-ctr")
        for c in (manager, driver):
            program, command = c["command"][0], c["args"][0]
            assert command in getattr(commands[program], "commands", {}), f"{program} {command}"
        manager_env, driver_env = env_of(manager), env_of(driver)
        # The sample's manager env wins over the manifest's own entries of the same names.
        assert {k: manager_env[k] for k in ("ENABLE_GPU_POD_EVICTION", "ENABLE_AUTO_DRAIN")} == {
            e["name"]: e["value"] for e in values["driver"]["manager"]["env"]
        }
        assert driver_env["DRIVER_PLATFORM"] == "talos" and driver_env["KERNEL_MODULE_TYPE"] == "auto"
        assert "HOST_ROOT" not in manager_env and "HOST_ROOT" not in driver_env  # rootFS is /
        assert probe.items() <= driver["startupProbe"].items()
        assert driver["startupProbe"]["exec"]["command"] == ["sh", "/usr/local/bin/startup-probe.sh"]
        assert ds["spec"]["updateStrategy"]["type"] == "OnDelete"


# ---------------------------------------------------------------------------------------------------------
# (a) and (b): images


class ImageRef(NamedTuple):
    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, image: str) -> ImageRef:
        name, _, digest = image.partition("@")
        last = name.rsplit("/", 1)[-1]
        repo, tag = (name.rsplit(":", 1)[0], last.split(":", 1)[1]) if ":" in last else (name, None)
        return cls(repo, tag, digest or None)


@functools.cache
def published() -> frozenset[str]:
    rm = release_matrix()
    releases = rm.load()
    return frozenset(t for driver in rm.drivers(releases) for t in rm.tags(releases, driver, IMAGE))


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_every_image_is_one_the_release_matrix_publishes(renders: dict[str, Rendered], name: str) -> None:
    tags = published()
    assert f"{IMAGE}:595.91.07-talosv1.14.0-rc.1" in tags  # the matrix read right
    unpublished = [
        f"{ds['metadata']['name']}/{c['name']}: {c['image']}"
        for ds in renders[name].daemonsets
        for c in containers_of(ds)
        if c["image"] not in tags
    ]
    assert unpublished == []


def _pool_release(rendered: Rendered, ds: dict[str, Any]) -> str:
    """The Talos release of the nodes the DaemonSet runs on (every node it selects has the same)."""
    selector = ds["spec"]["template"]["spec"]["nodeSelector"]
    releases = {
        n["metadata"]["labels"][OS_VERSION_LABEL]
        for n in rendered.nodes
        if selector.items() <= n["metadata"]["labels"].items()
    }
    (release,) = releases
    return str(release)


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_manager_and_driver_images_pair_up(renders: dict[str, Rendered], name: str) -> None:
    rendered = renders[name]
    for ds in rendered.daemonsets:
        manager = ImageRef.parse(Rendered.container(ds, "k8s-driver-manager")["image"])
        driver_image = Rendered.container(ds, "nvidia-driver-ctr")["image"]
        driver = ImageRef.parse(driver_image)
        assert driver.repository == manager.repository == IMAGE
        if manager.digest is not None:
            assert driver == manager  # a digest is used as is on every node
        else:
            # The samples' channel: each pool pulls the image of the driver its Talos release ships.
            assert driver.tag == f"production-talos{_pool_release(rendered, ds)}"
            assert manager.tag == "manager"  # used as is: the version-agnostic manager tag
        peermem = [c for c in containers_of(ds) if c["name"] == "nvidia-peermem-ctr"]
        assert all(c["image"] == driver_image for c in peermem)  # runs reload_nvidia_peermem of this image


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_every_node_gets_exactly_one_driver_daemonset(renders: dict[str, Rendered], name: str) -> None:
    rendered = renders[name]
    assert rendered.nodes
    for node in rendered.nodes:
        labels = node["metadata"]["labels"]
        assert labels["nvidia.com/gpu.present"] == "true"  # the NFD labels of talos_node were understood
        chosen = [
            d["metadata"]["name"]
            for d in rendered.daemonsets
            if d["spec"]["template"]["spec"]["nodeSelector"].items() <= labels.items()
        ]
        assert len(chosen) == 1, (node["metadata"]["name"], chosen)


# ---------------------------------------------------------------------------------------------------------
# (c) docs/configuration.md "What the operator passes"


def _envvars(app: typer.Typer) -> frozenset[str]:
    _register_commands()
    command: Any = typer.main.get_command(app)
    names: set[str] = set()
    for cmd in [command, *getattr(command, "commands", {}).values()]:
        for param in cmd.params:
            env = param.envvar
            names.update([env] if isinstance(env, str) else env or [])
    return frozenset(names)


def env_readers(probe_script: str) -> dict[str, frozenset[str]]:
    """Reader -> the environment names it reads, each taken from the code's own tables where it has one."""
    return {
        "HOST_ROOTS": frozenset(r.env for r in HOST_ROOTS),
        "Settings": frozenset(settings_env_names()),
        "driver-manager": frozenset(manager_cmd.ENV_NAMES),
        "node report": frozenset(variables.names("cluster")),
        # The global options' variables: typer's for the roots, the reader's for logging (settings/resolve.py).
        "CLI options": _envvars(driver_app) | _envvars(manager_cmd.app) | frozenset(variables.names("logging")),
        "startup probe": frozenset(re.findall(r"\$\{([A-Z][A-Z0-9_]+):-", probe_script)),  # its inputs
    }


# What each command reads (the container's command and first argument); the startup probe is added for a
# container whose startupProbe runs the probe script.
COMMAND_READERS = {
    ("driver-manager", "uninstall_driver"): {"HOST_ROOTS", "Settings", "driver-manager", "CLI options"},
    ("nvidia-driver", "init"): {"HOST_ROOTS", "Settings", "node report", "CLI options"},
    ("nvidia-driver", "reload_nvidia_peermem"): {"HOST_ROOTS", "Settings", "CLI options"},
    # The GDS/GDRCopy sidecars: `bash -xc "until ...; exec nvidia-gds-driver install"` (cli/companion_cmd.py).
    ("bash", "-xc"): {"HOST_ROOTS", "Settings"},
}
# Below a root, the files the code reads there by name, from its own tables.
SUBPATHS: dict[str, frozenset[str]] = {
    "SYSFS_ROOT": frozenset({str(FIRMWARE_PARAM)}),
    "USERSPACE_ROOT": frozenset(IMAGE_FIRMWARE_DIRS),
    "DRIVERS_CONF_DIR": frozenset(conf_file_name(m) for m in NVIDIA_MODULES),
}


def root_paths(env: dict[str, str]) -> dict[str, PurePosixPath]:
    """Each root's container path as the CLI takes it from this environment (HostPaths.from_env)."""
    paths = HostPaths.from_env(env)
    out = {r.env: PurePosixPath(str(getattr(paths, r.field))) for r in HOST_ROOTS if getattr(paths, r.field)}
    out["DRIVER_ROOT"] = PurePosixPath(str(paths.driver_root))
    out["HOST_OS_RELEASE"] = PurePosixPath(str(paths.host_os_release_override or OPERATOR_OS_RELEASE))
    out.pop("HOST_DRIVER_ROOT", None)  # a host path, not one in the container
    return out


def root_reads(root: str, where: PurePosixPath, mount: str) -> bool:
    """Whether the code reads ``mount`` through ``root`` (at ``where``): the root itself, or a file the
    code names below it (never "anything below /")."""
    path = PurePosixPath(mount)
    if path == where:
        return True
    if not path.is_relative_to(where):
        return False
    return str(path.relative_to(where)) in SUBPATHS.get(root, frozenset())


class Row(NamedTuple):
    containers: tuple[str, ...]
    item: str  # an env var name, or a mount path (starts with /); <module> stands for a module name
    read_by: tuple[str, ...]  # the readers: the backquoted names before the first ": " of "read by"
    ignored: str

    def matches(self, item: str) -> bool:
        return re.fullmatch(re.escape(self.item).replace(re.escape("<module>"), "[a-z][a-z0-9_-]*"), item) is not None


SECTION = "## What the operator passes"


def doc_rows() -> list[Row]:
    """The rows of the table: container(s) | env var or mount | read by | or: ignored, why."""
    text = DOC.read_text()
    assert SECTION in text, f"{DOC}: no section {SECTION!r}"
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) != 4 or cells[0] == "container" or set(cells[0]) <= {"-"}:
            continue
        (item,) = re.findall(r"`([^`]+)`", cells[1])
        readers = re.findall(r"`([^`]+)`", cells[2].split(": ", 1)[0])
        rows.append(Row(tuple(re.findall(r"`([^`]+)`", cells[0])), item, tuple(readers), cells[3]))
    assert len(rows) > 20, "the table was not found or not parsed"
    return rows


def row_of(rows: list[Row], container: str, item: str) -> Row | None:
    """The row for this container's env var or mount: the one naming it, else the one whose pattern matches."""
    mine = [r for r in rows if container in r.containers]
    exact = [r for r in mine if r.item == item]
    found = exact or [r for r in mine if r.matches(item)]
    return found[0] if found else None


class Passed(NamedTuple):
    """One env var or mount the operator gives one container, with what is needed to judge it."""

    case: str
    container: str
    item: str
    readers: frozenset[str]  # the readers that run in this container
    roots: dict[str, PurePosixPath]
    probe_mount: str | None  # where the startup probe script is mounted, in the container it probes


def passed(name: str, rendered: Rendered) -> Iterator[Passed]:
    for ds in rendered.daemonsets:
        for c in containers_of(ds):
            command = [*(c.get("command") or []), *(c.get("args") or [])] or [""]
            key = command[0], (command[1:] or [""])[0]
            readers = set(COMMAND_READERS.get(key, set()))
            mounts = mounts_of(c, ds)
            probe = ((c.get("startupProbe") or {}).get("exec") or {}).get("command") or []
            script = [m.mount_path for m in mounts if m.source == PROBE_CONFIGMAP and m.mount_path in probe]
            if script:
                readers.add("startup probe")
            env = {k: v for k, v in env_of(c).items() if not isinstance(v, ValueFrom)}
            for item in [*env_of(c), *(m.mount_path for m in mounts)]:
                yield Passed(name, c["name"], item, frozenset(readers), root_paths(env), script[0] if script else None)


def _all_passed(renders: dict[str, Rendered]) -> list[Passed]:
    return [p for name, r in renders.items() for p in passed(name, r)]


def test_the_table_lists_exactly_what_the_operator_passes(renders: dict[str, Rendered]) -> None:
    rows = doc_rows()
    keys = [(c, r.item) for r in rows for c in r.containers]
    assert len(keys) == len(set(keys)), f"listed twice: {sorted(k for k in keys if keys.count(k) > 1)}"
    used: set[tuple[str, str]] = set()
    missing = set()
    for p in _all_passed(renders):
        row = row_of(rows, p.container, p.item)
        if row is None:
            missing.add((p.container, p.item))
        else:
            used.add((p.container, row.item))
    assert sorted(missing) == [], "passed by the operator, missing from the table"
    assert sorted(set(keys) - used) == [], "in the table, passed to no rendered container"


def _judge(p: Passed, row: Row, readers: dict[str, frozenset[str]]) -> str | None:
    """What is wrong with the table's row for this env var or mount in this container, or None."""
    if bool(row.read_by) == bool(row.ignored.strip()):
        return "give either readers or the reason it is ignored"
    if row.ignored:
        reading = [r for r in p.readers if p.item in readers[r]] if not p.item.startswith("/") else []
        return f"listed as ignored but read by {reading}" if reading else None
    for reader in row.read_by:
        if p.item.startswith("/") and reader != "startup probe":
            if reader not in p.roots:
                return f"{reader} is not a root (paths.HOST_ROOTS)"
            if "HOST_ROOTS" not in p.readers:
                return f"no command of this project runs in {p.container}"
            if not root_reads(reader, p.roots[reader], p.item):
                return f"{reader} is {p.roots[reader]} here: the code reads nothing at {p.item} through it"
        elif reader not in p.readers:
            return f"{reader} does not run in this container (it runs {sorted(p.readers)})"
        elif p.item.startswith("/") and p.item != p.probe_mount:
            return f"the startup probe script is not mounted at {p.item}"
        elif not p.item.startswith("/") and p.item not in readers.get(reader, frozenset()):
            return f"{reader} does not read {p.item}"
    return None


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_what_the_table_says_of_each_entry_holds(renders: dict[str, Rendered], name: str) -> None:
    rows = doc_rows()
    readers = env_readers(renders[name].probe_script())
    wrong = [
        f"{p.container} {p.item}: {problem}"
        for p in passed(name, renders[name])
        if (row := row_of(rows, p.container, p.item)) and (problem := _judge(p, row, readers))
    ]
    assert wrong == []


def test_a_wrong_row_is_caught() -> None:
    roots = root_paths({})
    readers = env_readers("${GDS_ENABLED:-false}")
    driver = frozenset({"HOST_ROOTS", "Settings", "node report", "CLI options", "startup probe"})

    def judge(item: str, read_by: tuple[str, ...] = (), ignored: str = "", where: frozenset[str] = driver) -> str:
        p = Passed("t", "c", item, where, roots, "/usr/local/bin/startup-probe.sh")
        return _judge(p, Row(("c",), item, read_by, ignored), readers) or "ok"

    assert judge("GDS_ENABLED", ("Settings", "startup probe")) == "ok"
    assert judge("GDS_ENABLED", ignored="why").startswith("listed as ignored but read by")
    assert judge("NODE_IP", ("Settings",)) == "Settings does not read NODE_IP"
    assert judge("NODE_IP", ("Settings",), "why") == "give either readers or the reason it is ignored"
    assert judge("NODE_NAME", ("driver-manager",)).startswith("driver-manager does not run in this container")
    assert judge("/run/nvidia", ("RUN_DIR",)) == "ok"
    assert judge("/run/nvidia", ("RUN_DIR",), where=frozenset()).startswith("no command of this project runs")
    assert judge("/sys/devices/system", ("SYSFS_ROOT",)).startswith("SYSFS_ROOT is /sys here: the code reads nothing")
    assert judge("/drivers/nvidia-uvm.conf", ("DRIVERS_CONF_DIR",)) == "ok"
    assert judge("/drivers/other.conf", ("DRIVERS_CONF_DIR",)) != "ok"
    assert judge("/lib/firmware", ("USERSPACE_ROOT",)) == "ok" and judge("/opt", ("USERSPACE_ROOT",)) != "ok"
    assert judge("/var/log", ("LOG_DIR",)) == "LOG_DIR is not a root (paths.HOST_ROOTS)"
    assert judge("/usr/local/bin/startup-probe.sh", ("startup probe",)) == "ok"
    assert judge("/usr/local/bin/other.sh", ("startup probe",)).startswith("the startup probe script is not")
    row = Row(("c",), "/drivers/<module>.conf", ("DRIVERS_CONF_DIR",), "")
    assert row_of([row], "c", "/drivers/nvidia-uvm.conf") == row and row_of([row], "c", "/drivers/x/y.conf") is None
    assert row_of([row], "other", "/drivers/nvidia.conf") is None


def test_the_readers_are_really_collected() -> None:
    readers = env_readers("X=${GDS_ENABLED:-false}")
    assert {"NODE_NAME", "KUBERNETES_SERVICE_HOST", "KUBECONFIG", "OPERATOR_NAMESPACE"} <= readers["node report"]
    assert {"KERNEL_MODULE_TYPE", "GDS_ENABLED", "USE_HOST_MOFED"} <= readers["Settings"]
    assert {"HOST_ROOT", "RUN_DIR"} <= readers["HOST_ROOTS"] and readers["startup probe"] == {"GDS_ENABLED"}
    assert {"LOG_FORMAT", "VERBOSE"} <= readers["CLI options"]
    roots = root_paths({"HOST_ROOT_MOUNT": "/h"})
    assert roots["HOST_ROOT_MOUNT"] == PurePosixPath("/h") and roots["RUN_DIR"] == PurePosixPath("/run/nvidia")
    assert root_reads("SYSFS_ROOT", roots["SYSFS_ROOT"], "/sys/module/firmware_class/parameters/path")
    assert not root_reads("SYSFS_ROOT", roots["SYSFS_ROOT"], "/sys/devices/system")
    assert not root_reads("USERSPACE_ROOT", roots["USERSPACE_ROOT"], "/run/nvidia-topologyd")


# ---------------------------------------------------------------------------------------------------------
# (d) the standalone manifest's startup probe behaves as the operator's


def _standalone_probe() -> str:
    docs = [d for d in yaml.safe_load_all((DEPLOY / "standalone-daemonset.yaml").read_text()) if d]
    return str(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["startup-probe.sh"])


def _run_probe(script: str, work: Path, *, loaded: bool, status: str | None, smi_rc: int) -> tuple[int, str | None]:
    run, sysmod, bin_dir = work / "run/nvidia", work / "sys/module", work / "bin"
    run.mkdir(parents=True)
    bin_dir.mkdir()
    if loaded:
        (sysmod / "nvidia").mkdir(parents=True)
        (sysmod / "nvidia/refcnt").write_text("3\n")
    if status is not None:
        (run / "validations").mkdir()
        (run / "validations/.driver-daemons-status").write_text(status)
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nexit {smi_rc}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    (work / "probe.sh").write_text(script.replace("/run/nvidia", str(run)).replace("/sys/module", str(sysmod)))
    env = {"PATH": f"{bin_dir}:{os.defpath}", "GDS_ENABLED": "true", "GPU_DIRECT_RDMA_ENABLED": "false"}
    done = subprocess.run(["sh", str(work / "probe.sh")], env=env, capture_output=True, check=False, timeout=30)
    ready = run / "validations/.driver-ctr-ready"
    return done.returncode, ready.read_text() if ready.exists() else None


@pytest.mark.parametrize(
    ("loaded", "status", "smi_rc"),
    [(True, None, 0), (True, "Ready", 0), (True, "NotReady", 0), (False, None, 0), (True, None, 9)],
)
def test_the_standalone_startup_probe_behaves_as_the_operators(
    renders: dict[str, Rendered], tmp_path: Path, loaded: bool, status: str | None, smi_rc: int
) -> None:
    operators = renders["cp-v1.13.9"].probe_script()
    assert operators == renders["nd-pools"].probe_script()  # one script on both paths

    def outcome(script: str, where: str) -> tuple[int, str | None]:
        return _run_probe(script, tmp_path / where, loaded=loaded, status=status, smi_rc=smi_rc)

    theirs, ours = outcome(operators, "operator"), outcome(_standalone_probe(), "standalone")
    assert (ours[0] == 0, ours[1]) == (theirs[0] == 0, theirs[1])


# ---------------------------------------------------------------------------------------------------------
# The helpers' own facts: NFD's labels of a Talos node, and the chart's ClusterPolicy


def test_a_talos_node_is_labelled_as_nfd_labels_it() -> None:
    labels = talos_node("n", "v1.14.0-rc.1")["metadata"]["labels"]
    nfd = {k.split("/", 1)[1]: v for k, v in labels.items() if k.startswith("feature.node.kubernetes.io/")}
    # VERSION_ID keeps its "v"; no VERSION_ID.major/minor for a value that does not start with a digit.
    assert nfd == {
        "pci-10de.present": "true",
        "system-os_release.ID": "talos",
        "system-os_release.VERSION_ID": "v1.14.0-rc.1",
        "kernel-version.full": "6.18.44-talos",
    }
    assert (
        talos_node("n", "v1.13.9", kernel="6.18.44+x")["metadata"]["labels"][
            "feature.node.kubernetes.io/kernel-version.full"
        ]
        == "6.18.44_x"
    )
    with pytest.raises(ValueError, match="no kernel known"):
        talos_node("n", "v9.9.9")


def test_the_chart_values_become_the_clusterpolicy_the_template_writes() -> None:
    spec = clusterpolicy_from_values(_values())["spec"]
    driver = spec["driver"]
    assert driver["useNvidiaDriverCRD"] is False and driver["version"] == "production"
    assert driver["manager"]["image"] == "talos-nvidia-driver" and driver["manager"]["version"] == "manager"
    assert driver["env"] == [{"name": "DRIVER_PLATFORM", "value": "talos"}]
    # upgradePolicy: the chart's defaults under the one key the sample sets, gpuPodDeletion as podDeletion.
    assert driver["upgradePolicy"]["autoUpgrade"] is False and driver["upgradePolicy"]["maxParallelUpgrades"] == 1
    assert driver["upgradePolicy"]["podDeletion"] == {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": False}
    assert "podSelector" not in driver["upgradePolicy"]["drain"]  # "" is Go-false: left out
    assert driver["kernelModuleConfig"] == {"name": ""} and "secretEnv" not in driver and "args" not in driver
    assert spec["cdi"] == {"enabled": True, "nriPluginEnabled": True} and spec["psa"] == {"enabled": True}
    assert spec["toolkit"]["installDir"] == "/var/nvidia/toolkit" and spec["hostPaths"]["rootFS"] == "/"
    assert spec["gds"]["version"] == "2.29.4" and spec["gdrcopy"]["enabled"] is False
    # With the NVIDIADriver CRD the ClusterPolicy's driver says only that (and its upgrade policy).
    crd = clusterpolicy_from_values(_deep_set(_values(), "driver.nvidiaDriverCRD.enabled", True))["spec"]
    assert set(crd["driver"]) == {"enabled", "useNvidiaDriverCRD", "upgradePolicy"}
    # nriPluginEnabled only with cdi.enabled; a null removes a chart default; lists replace.
    off = clusterpolicy_from_values({"cdi": {"enabled": False, "nriPluginEnabled": True}})["spec"]
    assert off["cdi"] == {"enabled": False}
    assert "tolerations" not in clusterpolicy_from_values({"daemonsets": {"tolerations": None}})["spec"]["daemonsets"]
    assert clusterpolicy_from_values({"driver": {"env": []}})["spec"]["driver"].get("env") is None
    with pytest.raises(ValueError, match="devicePlugin"):
        clusterpolicy_from_values({"devicePlugin": {"enabled": False}})
