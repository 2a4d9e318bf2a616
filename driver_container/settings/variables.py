"""Every environment variable the project reads, declared once: its name, default, parser, who reads it and
what it means. The roots are the other table (``base/paths.HOST_ROOTS``); docs/configuration.md lists both
and tests/unit/settings/test_variables.py keeps it equal to them.

Only ``driver_container/settings/`` reads these names; everything else is handed the typed values
(tests/unit/project/test_env_readers.py fails on any other module that reads ``os.environ``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypeVar

from driver_container.base.errors import UsageError
from driver_container.base.records import NamedRecord
from driver_container.formats.numbers import parse_decimal_seconds

# What parses a variable's value: ``flag`` true/false, ``seconds`` a non-negative number, ``choice`` one
# of fixed words (case-insensitive), ``text`` stripped (empty is unset), ``set`` only whether it is set.
Kind = Literal["text", "flag", "seconds", "choice", "set", "prefix"]
# The groups say which typed record carries the value (settings/__init__.py, settings/resolve.py).
Group = Literal["behaviour", "logging", "cluster", "manager", "tests"]
_Choice = TypeVar("_Choice", bound=str)

NVIDIA_DRIVER = "nvidia-driver"  # every command of nvidia-driver (init, status, bug-report, ...)
COMPANIONS = "nvidia-gds-driver, nvidia-gdrcopy-driver"
MANAGER = "driver-manager"
EVERY = f"{NVIDIA_DRIVER}, {MANAGER}, {COMPANIONS}"
CLUSTER_READERS = f"init (node report), {MANAGER}"
# gpu-operator sets OPERATOR_NAMESPACE from the pod's own namespace (fieldRef metadata.namespace;
# NVIDIA/gpu-operator assets/state-driver/0500_daemonset.yaml @ 10ee5b3638b8, v26.7.0): the service
# account's namespace file says the same inside a pod; outside one, the operator's usual namespace.
DEFAULT_OPERATOR_NAMESPACE = "gpu-operator"


class Variable(NamedRecord):
    name: str
    default: str  # the value an unset (or empty) variable has, as it is written; "" means none
    kind: Kind
    group: Group
    read_by: str
    meaning: str
    shown_default: str = ""  # the default as docs/configuration.md says it, where it is a rule, not a value

    @property
    def documented_default(self) -> str:
        return self.shown_default or (f"`{self.default}`" if self.default else "—")


_V = Variable
VARIABLES: tuple[Variable, ...] = (
    _V("DRIVER_PLATFORM", "auto", "choice", "behaviour", EVERY, "`auto` detects Talos; `talos` or `generic` overrides"),
    _V("DRIVER_VERSION", "", "text", "behaviour", EVERY, "the version the image claims to ship"),
    _V(
        "KERNEL_MODULE_TYPE",
        "auto",
        "choice",
        "behaviour",
        EVERY,
        "`open`/`proprietary`: the other flavour loaded is a warning",
    ),
    _V("NVIDIA_MODESET", "true", "flag", "behaviour", EVERY, "`false`: `init` does not wait for `nvidia_modeset`"),
    _V(
        "GPU_DIRECT_RDMA_ENABLED",
        "false",
        "flag",
        "behaviour",
        EVERY,
        "`true`: load `nvidia_peermem` (generic hosts); refused on Talos",
    ),
    _V("USE_HOST_MOFED", "false", "flag", "behaviour", EVERY, "parsed, not acted on (a warning)"),
    _V("GDS_ENABLED", "false", "flag", "behaviour", EVERY, "on Talos `init` refuses unless `nvidia_fs` is loaded"),
    _V("GDRCOPY_ENABLED", "false", "flag", "behaviour", EVERY, "on Talos `init` refuses unless `gdrdrv` is loaded"),
    _V(
        "MODULE_WAIT_TIMEOUT",
        "300",
        "seconds",
        "behaviour",
        EVERY,
        "seconds `init` waits for Talos to load the modules",
    ),
    _V(
        "DRIVER_CONFIG_DIGEST",
        "",
        "text",
        "behaviour",
        EVERY,
        "the operator's driver config digest (state file, module-file verdict)",
    ),
    _V(
        "NVIDIA_PERSISTENCED",
        "auto",
        "choice",
        "behaviour",
        EVERY,
        "`auto`, `true` or `false`: start nvidia-persistenced",
    ),
    _V(
        "NVIDIA_FABRICMANAGER",
        "auto",
        "choice",
        "behaviour",
        EVERY,
        "`auto`, `true` or `false`: start Fabric Manager on NVSwitch nodes",
    ),
    _V(
        "FABRIC_WAIT_TIMEOUT",
        "600",
        "seconds",
        "behaviour",
        EVERY,
        "seconds `init` waits for Fabric Manager and the fabric",
    ),
    _V(
        "DRIVER_ROOT_PROCFS",
        "none",
        "choice",
        "behaviour",
        EVERY,
        "`mps-minimal`: a procfs in the published root for DRA MPS",
    ),
    _V(
        "NVFM_CONFIG_<FIELD>",
        "",
        "prefix",
        "behaviour",
        EVERY,
        "sets `<FIELD>` in `init`'s copy of `fabricmanager.cfg`",
    ),
    _V("POD_NAME", "", "text", "behaviour", EVERY, "this pod's name (a fieldRef); wins over `HOSTNAME`"),
    _V("HOSTNAME", "", "text", "behaviour", EVERY, "this pod's name where `POD_NAME` is unset (no hostNetwork)"),
    _V("LOG_FORMAT", "human", "choice", "logging", EVERY, "`human` or `json` (exactly); `--log-format` overrides"),
    _V("VERBOSE", "false", "flag", "logging", EVERY, "debug logging; `--verbose` overrides"),
    _V(
        "NODE_NAME",
        "",
        "text",
        "cluster",
        CLUSTER_READERS,
        "the Node (downward API `spec.nodeName`); unset: no API call",
    ),
    _V(
        "OPERATOR_NAMESPACE",
        DEFAULT_OPERATOR_NAMESPACE,
        "text",
        "cluster",
        CLUSTER_READERS,
        "the namespace of this pod, its DaemonSet and the refusal Event",
        shown_default="the service account's namespace, else `gpu-operator`",
    ),
    _V("KUBECONFIG", "", "text", "cluster", CLUSTER_READERS, "a kubeconfig file; wins over the service account"),
    _V("KUBERNETES_SERVICE_HOST", "", "text", "cluster", CLUSTER_READERS, "the API server (set by the kubelet)"),
    _V("KUBERNETES_SERVICE_PORT", "443", "text", "cluster", CLUSTER_READERS, "the API server's port"),
    _V("FORCE_REINSTALL", "false", "flag", "manager", MANAGER, "stock variable, read as the stock manager does"),
    _V(
        "HOST_DRIVER_DELAY", "60", "seconds", "manager", MANAGER, "seconds to wait after labelling a pre-installed node"
    ),
    _V("OPERAND_WAIT_TIMEOUT", "300", "seconds", "manager", MANAGER, "seconds to wait for the paused operands to go"),
    _V("NODE_LABEL_FOR_GPU_POD_EVICTION", "", "text", "manager", MANAGER, "a custom operand label paused and restored"),
    _V("ENABLE_GPU_POD_EVICTION", "", "set", "manager", MANAGER, "stock: no effect on Talos (logged)"),
    _V("ENABLE_AUTO_DRAIN", "", "set", "manager", MANAGER, "stock: no effect on Talos (logged)"),
    _V("DRAIN_USE_FORCE", "", "set", "manager", MANAGER, "stock: no effect on Talos (logged)"),
    _V("DRAIN_POD_SELECTOR_LABEL", "", "set", "manager", MANAGER, "stock: no effect on Talos (logged)"),
    _V("DRAIN_TIMEOUT_SECONDS", "", "set", "manager", MANAGER, "stock: no effect on Talos (logged)"),
    _V("DRAIN_DELETE_EMPTYDIR_DATA", "", "set", "manager", MANAGER, "stock: no effect on Talos (logged)"),
    _V(
        "NVIDIA_PERSISTENCED_RUNTIME_DIR",
        "",
        "text",
        "tests",
        "init",
        "hidden (tests): nvidia-persistenced's runtime dir in this container",
        shown_default="`/var/run/nvidia-persistenced` (node/persistenced.py)",
    ),
)
BY_NAME: dict[str, Variable] = {v.name: v for v in VARIABLES}
FABRIC_OVERRIDE_PREFIX = "NVFM_CONFIG_"  # NVIDIA's driver container: NVFM_CONFIG_<FIELD> sets fabricmanager.cfg's FIELD


def names(*groups: Group) -> tuple[str, ...]:
    """The variables of ``groups`` (every group when none is named), prefix rows left out."""
    return tuple(v.name for v in VARIABLES if v.kind != "prefix" and (not groups or v.group in groups))


def _declared(name: str, kind: Kind) -> Variable:
    variable = BY_NAME[name]  # a KeyError is a bug: every name read is declared above
    assert variable.kind == kind, f"{name} is declared {variable.kind}, read as {kind}"
    return variable


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


def parse_bool(name: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise UsageError(f"{name}={value!r}: expected true or false", name=name, value=value)


def parse_choice(name: str, value: str | None, choices: tuple[_Choice, ...], default: _Choice) -> _Choice:
    if value is None or value.strip() == "":
        return default
    lowered = value.strip().lower()
    for choice in choices:
        if choice == lowered:
            return choice
    raise UsageError(f"{name}={value!r}: expected one of {', '.join(choices)}", name=name, value=value)


def parse_seconds(name: str, value: str | None, default: float) -> float:
    if value is None or value.strip() == "":
        return default
    seconds = parse_decimal_seconds(value.strip())
    if seconds is None:
        raise UsageError(
            f"{name}={value!r}: expected a non-negative number of seconds, e.g. 300 or 1.5", name=name, value=value
        )
    return seconds


def text(env: Mapping[str, str], name: str) -> str | None:
    """Stripped; unset or empty is the declared default (None where there is none)."""
    return (env.get(name) or "").strip() or _declared(name, "text").default or None


def flag(env: Mapping[str, str], name: str) -> bool:
    return parse_bool(name, env.get(name), _declared(name, "flag").default == "true")


def seconds(env: Mapping[str, str], name: str) -> float:
    return parse_seconds(name, env.get(name), float(_declared(name, "seconds").default))


def choice(env: Mapping[str, str], name: str, choices: tuple[_Choice, ...]) -> _Choice:
    default = _declared(name, "choice").default
    for word in choices:  # the declared default is one of the choices (test_variables.py)
        if word == default:
            return parse_choice(name, env.get(name), choices, word)
    raise AssertionError(f"{name}: default {default!r} is not one of {choices}")


def is_set(env: Mapping[str, str], name: str) -> bool:
    _declared(name, "set")
    return bool(env.get(name))
