"""The one configuration reader (settings/): every variable declared once, its default the one the docs give,
resolved without typer, an invalid value a usage error worded as the CLI words it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.support import REPO

from driver_container import logs
from driver_container.base.errors import UsageError
from driver_container.base.paths import HOST_ROOTS, HostPaths
from driver_container.kube.endpoint import KubeConfig, operator_namespace
from driver_container.manager.manager import ManagerOptions
from driver_container.node import persistenced
from driver_container.settings import (
    DAEMON_CHOICES,
    MODULE_TYPE_CHOICES,
    PLATFORM_CHOICES,
    ROOT_PROCFS_CHOICES,
    Cluster,
    Settings,
    variables,
)
from driver_container.settings.resolve import LOG_FORMAT_CHOICES, Logging, manager_knobs, resolve

DOC = REPO / "docs" / "configuration.md"
EVERY_VARIABLE = "## Every variable"
ROW = re.compile(r"^\| `([A-Z][A-Z0-9_<>]*)` \| ([^|]*) \|", re.M)


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def doc_mismatches(text: str, table: tuple[variables.Variable, ...]) -> list[str]:
    """How the docs' table of every variable and the code's differ (names and defaults, both ways)."""
    documented = {name: default.strip() for name, default in ROW.findall(_section(text, EVERY_VARIABLE))}
    declared = {v.name: v.documented_default for v in table}
    problems = [f"{name}: not in the docs" for name in declared.keys() - documented.keys()]
    problems += [f"{name}: documented, not declared" for name in documented.keys() - declared.keys()]
    problems += [
        f"{name}: the docs say {documented[name]}, the code {declared[name]}"
        for name in declared.keys() & documented.keys()
        if documented[name] != declared[name]
    ]
    return sorted(problems)


def test_the_docs_list_every_variable_with_its_default() -> None:
    assert doc_mismatches(DOC.read_text(), variables.VARIABLES) == []


def test_the_docs_check_can_fail() -> None:
    text = DOC.read_text()
    assert doc_mismatches(
        text.replace("| `FABRIC_WAIT_TIMEOUT` | `600` |", "| `FABRIC_WAIT_TIMEOUT` | `60` |"), variables.VARIABLES
    ) == ["FABRIC_WAIT_TIMEOUT: the docs say `60`, the code `600`"]
    extra = variables.Variable("NOT_DOCUMENTED", "1", "text", "tests", "init", "x")
    assert doc_mismatches(text, (*variables.VARIABLES, extra)) == ["NOT_DOCUMENTED: not in the docs"]
    assert doc_mismatches(text, variables.VARIABLES[1:]) == ["DRIVER_PLATFORM: documented, not declared"]


def test_the_docs_list_every_root() -> None:
    documented = set(ROW.findall(_section(DOC.read_text(), "## Paths")))
    assert {name for name, _ in documented} == {root.env for root in HOST_ROOTS}


def test_each_choice_default_is_one_of_its_choices() -> None:
    choices = {
        "DRIVER_PLATFORM": PLATFORM_CHOICES,
        "KERNEL_MODULE_TYPE": MODULE_TYPE_CHOICES,
        "NVIDIA_PERSISTENCED": DAEMON_CHOICES,
        "NVIDIA_FABRICMANAGER": DAEMON_CHOICES,
        "DRIVER_ROOT_PROCFS": ROOT_PROCFS_CHOICES,
        "LOG_FORMAT": LOG_FORMAT_CHOICES,
    }
    assert {v.name for v in variables.VARIABLES if v.kind == "choice"} == set(choices)
    for name, allowed in choices.items():
        assert variables.BY_NAME[name].default in allowed, name
    assert LOG_FORMAT_CHOICES == logs.LOG_FORMATS


def test_the_defaults_of_the_records_are_the_declared_ones() -> None:
    """Settings(), ManagerOptions() and an empty environment agree with the table."""
    assert Settings.from_env({}) == Settings()
    knobs = manager_knobs({})
    options = ManagerOptions(node_name="n")
    assert (knobs.host_driver_delay, knobs.pod_wait_timeout) == (options.host_driver_delay, options.pod_wait_timeout)
    assert options.operator_namespace == variables.DEFAULT_OPERATOR_NAMESPACE == "gpu-operator"
    assert variables.BY_NAME["NVIDIA_PERSISTENCED_RUNTIME_DIR"].shown_default.startswith(
        f"`{persistenced.CONTAINER_RUNTIME_DIR}`"
    )


def test_a_name_read_but_not_declared_is_a_bug() -> None:
    with pytest.raises(KeyError):
        variables.flag({}, "NOT_DECLARED")
    with pytest.raises(AssertionError, match="declared flag, read as seconds"):
        variables.seconds({}, "VERBOSE")


def test_pod_name_prefers_pod_name_then_hostname() -> None:
    assert Cluster.from_env({"POD_NAME": "a", "HOSTNAME": "b"}).pod_name == "a"
    assert Cluster.from_env({"POD_NAME": " ", "HOSTNAME": "b"}).pod_name == "b"
    assert Cluster.from_env({}).pod_name is None
    assert Settings.from_env({"HOSTNAME": "b"}).pod_name == "b"


def test_in_a_cluster_takes_a_node_and_an_api() -> None:
    assert Cluster.from_env({"NODE_NAME": "n", "KUBERNETES_SERVICE_HOST": "10.0.0.1"}).in_cluster
    assert Cluster.from_env({"NODE_NAME": "n", "KUBECONFIG": "/k"}).in_cluster
    assert not Cluster.from_env({"NODE_NAME": " ", "KUBECONFIG": "/k"}).in_cluster
    assert not Cluster.from_env({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}).in_cluster
    assert Cluster.from_env({}).service_port == "443"


def test_operator_namespace_one_rule(tmp_path: Path) -> None:
    """As set, else the service account's namespace, else gpu-operator: for init's report and driver-manager."""
    account = tmp_path / "sa"
    account.mkdir()
    config = KubeConfig(service_account_dir=account)
    assert operator_namespace(Cluster(), config) == "gpu-operator"
    (account / "namespace").write_text("nvidia-gpu\n")
    assert operator_namespace(Cluster(), config) == "nvidia-gpu"
    assert operator_namespace(Cluster.from_env({"OPERATOR_NAMESPACE": " ops "}), config) == "ops"


def test_resolve_without_typer(tmp_path: Path) -> None:
    env = {"HOST_ROOT_MOUNT": str(tmp_path), "LOG_FORMAT": "json", "VERBOSE": "yes", "DRIVER_PLATFORM": "talos"}
    got = resolve(env)
    assert got.paths == HostPaths.from_mapping({"HOST_ROOT_MOUNT": tmp_path})
    assert got.settings == Settings.from_env(env) and got.settings.driver_platform == "talos"
    assert got.logging == Logging("json", True) and got.persistenced_runtime_dir is None
    assert resolve({"NVIDIA_PERSISTENCED_RUNTIME_DIR": "/tmp/p"}).persistenced_runtime_dir == Path("/tmp/p")


def test_explicit_options_win_over_the_environment(tmp_path: Path) -> None:
    env = {"HOST_ROOT_MOUNT": "/from-env", "LOG_FORMAT": "json", "VERBOSE": "false"}
    got = resolve(env, {"HOST_ROOT_MOUNT": tmp_path, "LOG_FORMAT": "human", "VERBOSE": True, "RUN_DIR": None})
    assert got.paths == HostPaths.from_mapping({"HOST_ROOT_MOUNT": tmp_path}) and got.logging == Logging("human", True)
    assert resolve(env, {"VERBOSE": False, "LOG_FORMAT": None}).logging == Logging("json", False)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LOG_FORMAT": "Json"}, "LOG_FORMAT='Json': not one of human, json"),
        ({"VERBOSE": "maybe"}, "VERBOSE='maybe': expected true or false"),
        ({"DRIVER_PLATFORM": "bsd"}, "DRIVER_PLATFORM='bsd': expected one of auto, talos, generic"),
        ({"MODULE_WAIT_TIMEOUT": "-1"}, "MODULE_WAIT_TIMEOUT='-1': expected a non-negative number of seconds"),
    ],
)
def test_an_invalid_value_is_a_usage_error_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError) as raised:
        resolve(env)
    assert raised.value.message.startswith(message) and raised.value.exit_code == 2


def test_manager_knobs() -> None:
    env = {"NODE_NAME": " n1 ", "FORCE_REINSTALL": "true", "HOST_DRIVER_DELAY": "1.5", "DRAIN_USE_FORCE": "x"}
    knobs, node_name = manager_knobs(env), Settings.from_env(env).cluster.node_name
    assert (node_name, knobs.force_reinstall, knobs.host_driver_delay) == ("n1", True, 1.5)
    assert knobs.set_but_ignored == ("DRAIN_USE_FORCE",) and Settings.from_env({}).cluster.node_name is None
