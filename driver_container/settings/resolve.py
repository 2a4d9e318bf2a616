"""A command's whole configuration from the environment and its explicit options, resolved once, without typer.

An explicit option (``overrides``, keyed by the variable's name; None: not given) wins over the environment.
The CLI hands its options here (cli/app.py, cli/manager_cmd.py), the companions and a typer-free ``init``
call ``resolve`` alone; both raise the same ``UsageError`` on a bad value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, get_args

from driver_container.base.errors import UsageError
from driver_container.base.paths import HOST_ROOTS, HostPaths
from driver_container.base.records import NamedRecord
from driver_container.settings import Settings
from driver_container.settings import variables as v

LogFormatChoice = Literal["human", "json"]  # logs.LogFormat's values (tests/unit/settings/test_variables.py)
LOG_FORMAT_CHOICES: tuple[LogFormatChoice, ...] = get_args(LogFormatChoice)
Override = str | Path | bool | None


class Logging(NamedRecord):
    log_format: LogFormatChoice = "human"  # LOG_FORMAT, --log-format
    verbose: bool = False  # VERBOSE, --verbose

    @property
    def json(self) -> bool:
        return self.log_format == "json"


class Startup(NamedRecord):
    """What ``nvidia-driver init`` needs before it starts, from the environment alone."""

    paths: HostPaths
    settings: Settings
    logging: Logging
    persistenced_runtime_dir: Path | None  # NVIDIA_PERSISTENCED_RUNTIME_DIR (tests); None: the daemon's own


class ManagerKnobs(NamedRecord):
    """``driver-manager``'s own variables, besides the ``Settings`` it shares with every command (its options
    are built from both: cli/manager_cmd.py)."""

    force_reinstall: bool
    host_driver_delay: float
    pod_wait_timeout: float
    custom_operand_label: str | None
    set_but_ignored: tuple[str, ...]  # stock drain/eviction variables that are set: no effect on Talos


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def logging_of(env: Mapping[str, str] | None = None, overrides: Mapping[str, Override] | None = None) -> Logging:
    """LOG_FORMAT exactly ``human`` or ``json`` (as ``--log-format``: no other case), VERBOSE a flag;
    ``--verbose`` can only turn it on."""
    e, given = _env(env), overrides or {}
    chosen = given.get("LOG_FORMAT")
    raw = str(chosen) if chosen is not None else e.get("LOG_FORMAT") or v.BY_NAME["LOG_FORMAT"].default
    log_format = next((c for c in LOG_FORMAT_CHOICES if c == raw), None)
    if log_format is None:
        raise UsageError(
            f"LOG_FORMAT={raw!r}: not one of {', '.join(LOG_FORMAT_CHOICES)}", name="LOG_FORMAT", value=raw
        )
    return Logging(log_format, given.get("VERBOSE") is True or v.flag(e, "VERBOSE"))


def paths_of(env: Mapping[str, str] | None = None, overrides: Mapping[str, Override] | None = None) -> HostPaths:
    e, given = _env(env), overrides or {}
    values: dict[str, str | Path | None] = {root.env: e.get(root.env) for root in HOST_ROOTS}
    for root in HOST_ROOTS:
        option = given.get(root.env)
        if isinstance(option, str | Path) and str(option) != "":
            values[root.env] = option
    return HostPaths.from_mapping(values)


def persistenced_runtime_dir(env: Mapping[str, str] | None = None, override: Path | None = None) -> Path | None:
    if override is not None:
        return override
    value = v.text(_env(env), "NVIDIA_PERSISTENCED_RUNTIME_DIR")
    return Path(value) if value else None


def resolve(env: Mapping[str, str] | None = None, overrides: Mapping[str, Override] | None = None) -> Startup:
    """Everything ``init`` reads, from ``env`` (default: this process's) and explicit options."""
    e, given = _env(env), overrides or {}
    runtime_dir = given.get("NVIDIA_PERSISTENCED_RUNTIME_DIR")
    runtime_dir = runtime_dir if isinstance(runtime_dir, str | Path) else None
    return Startup(
        paths=paths_of(e, given),
        settings=Settings.from_env(e),
        logging=logging_of(e, given),
        persistenced_runtime_dir=persistenced_runtime_dir(e, Path(runtime_dir) if runtime_dir else None),
    )


def manager_knobs(env: Mapping[str, str] | None = None) -> ManagerKnobs:
    e = _env(env)
    return ManagerKnobs(
        force_reinstall=v.flag(e, "FORCE_REINSTALL"),
        host_driver_delay=v.seconds(e, "HOST_DRIVER_DELAY"),
        pod_wait_timeout=v.seconds(e, "OPERAND_WAIT_TIMEOUT"),
        custom_operand_label=v.text(e, "NODE_LABEL_FOR_GPU_POD_EVICTION"),
        set_but_ignored=tuple(name for name in v.names("manager") if v.BY_NAME[name].kind == "set" and e.get(name)),
    )
