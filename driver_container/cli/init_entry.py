"""``init`` as the operator's DaemonSet runs it, without typer: ``nvidia-driver init`` (and ``init --no-wait``)
with every option in the environment.

``init`` starts on every GPU node at every pod start, and after a restart it usually finds DRIVER_ROOT
unchanged: its own work is then ~20 ms, while importing typer and building its command costs ~100 ms
(bench/startup.py, bench/README.md). So for exactly those command lines ``cli.main`` comes here: the
environment is resolved by the same readers the typer command uses (``base/paths.HostPaths``,
``settings.Settings``, ``logs``), and the run is the typer command's own (``start_init``). Any other command
line, and any value these readers would not take exactly as typer does, goes through typer (``cli/app.py``,
``cli/init_cmd.py``), which parses, documents and reports usage errors for every command.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from driver_container import logs
from driver_container.base.paths import HostPaths
from driver_container.lifecycle import init as lifecycle_init
from driver_container.runtime.logfile import keep_log
from driver_container.runtime.runner import Runner
from driver_container.settings import Settings

log = logging.getLogger(__name__)

# The command lines served here: what NVIDIA's DaemonSet runs, and its --no-wait form (tests, demos).
DIRECT_ARGS = (["init"], ["init", "--no-wait"])
# VERBOSE values that click's boolean (typer's envvar) and ours read alike; anything else goes to typer.
_VERBOSE = {"": False, "1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False}
_VERBOSE |= {"off": False}
PERSISTENCED_RUNTIME_DIR_ENV = "NVIDIA_PERSISTENCED_RUNTIME_DIR"  # cli/init_cmd.py's hidden option


def start_init(
    paths: HostPaths,
    settings: Settings,
    *,
    no_wait: bool,
    persistenced_runtime_dir: Path | None,
    notes: tuple[str, ...] = (),
) -> None:
    """The ``init`` command's run, for typer's command and the direct entry alike; ``notes``: lines about
    the command line, logged once the log file is kept."""
    keep_log(paths.run_dir)  # RUN_DIR/nvidia-driver.log for bug-report (pods' stdout is unreadable inside)
    for note in notes:
        log.info("%s", note)
    options = lifecycle_init.InitOptions(no_wait=no_wait, persistenced_runtime_dir=persistenced_runtime_dir)
    for line in settings.unused_lines():
        log.warning("%s", line)
    # Looked up at call time: the CLI boundary's tests replace run_init (tests/unit/cli/test_cli_boundary.py).
    lifecycle_init.run_init_reporting_refusal(paths, settings, Runner(), options)


def logging_of(env: Mapping[str, str]) -> tuple[bool, bool] | None:
    """(json, verbose) from LOG_FORMAT and VERBOSE, or None where typer's reading could differ (typer then
    reads them, and reports a bad value as the usage error it is)."""
    log_format = env.get("LOG_FORMAT") or "human"  # click ignores an empty variable
    verbose = _VERBOSE.get(env.get("VERBOSE", "").strip().lower())
    if log_format not in logs.LOG_FORMATS or verbose is None:
        return None
    return log_format == "json", verbose


def run_direct(args: list[str], env: Mapping[str, str]) -> bool:
    """Run ``init`` for a command line of ``DIRECT_ARGS``; False (nothing done) for any other, or where the
    environment needs typer's reading."""
    if args not in DIRECT_ARGS:
        return False
    logging_choice = logging_of(env)
    if logging_choice is None:
        return False
    json_format, verbose = logging_choice
    logs.configure(json_format=json_format, verbose=verbose)
    runtime_dir = env.get(PERSISTENCED_RUNTIME_DIR_ENV) or None
    start_init(
        HostPaths.from_env(env),
        Settings.from_env(env),
        no_wait=args == ["init", "--no-wait"],
        persistenced_runtime_dir=Path(runtime_dir) if runtime_dir else None,
    )
    return True
