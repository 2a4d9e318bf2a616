"""``init`` as the operator's DaemonSet runs it, without typer: ``nvidia-driver init`` (and ``init --no-wait``)
with every option in the environment.

``init`` starts on every GPU node at every pod start, and after a restart it usually finds DRIVER_ROOT
unchanged: its own work is then ~20 ms, while importing typer and building its command costs ~100 ms
(bench/startup.py, bench/README.md). So for exactly those command lines ``cli.main`` comes here: the
environment is resolved by the one configuration reader every command uses (``settings/resolve.py``), and
the run is the typer command's own (``start_init``). Any other command line, and a value the reader refuses,
goes through typer (``cli/app.py``, ``cli/init_cmd.py``), which parses, documents and reports usage errors
for every command.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from driver_container import logs
from driver_container.base.errors import UsageError
from driver_container.base.paths import HostPaths
from driver_container.lifecycle import init as lifecycle_init
from driver_container.runtime.logfile import keep_log
from driver_container.runtime.runner import Runner
from driver_container.settings import Settings, resolve

log = logging.getLogger(__name__)

# The command lines served here: what NVIDIA's DaemonSet runs, and its --no-wait form (tests, demos).
DIRECT_ARGS = (["init"], ["init", "--no-wait"])


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


def run_direct(args: list[str], env: Mapping[str, str] | None = None) -> bool:
    """Run ``init`` for a command line of ``DIRECT_ARGS``; False (nothing done) for any other, or where the
    environment (default: this process's) holds a value the reader refuses (typer then reports it as the
    usage error it is)."""
    if args not in DIRECT_ARGS:
        return False
    try:
        startup = resolve.resolve(env)
    except UsageError:
        return False
    logs.configure(json_format=startup.logging.json, verbose=startup.logging.verbose)
    start_init(
        startup.paths,
        startup.settings,
        no_wait=args == ["init", "--no-wait"],
        persistenced_runtime_dir=startup.persistenced_runtime_dir,
    )
    return True
