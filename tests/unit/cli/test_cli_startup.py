"""Start-up of the console script: only the named command's module is registered (cli.command_modules,
whose table must match the modules), and the garbage collector is off for start-up only (cli.main)."""

from __future__ import annotations

import gc
import importlib
import subprocess
import sys

from driver_container.cli import COMMAND_MODULES, command_modules
from driver_container.cli.app import app
from driver_container.runtime.supervise import Shutdown, run_in_child


def test_table_lists_exactly_the_commands_each_module_registers() -> None:
    for module in COMMAND_MODULES:
        importlib.import_module(f"driver_container.cli.{module}")
    registered: dict[str, set[str]] = {}
    for info in app.registered_commands:
        assert info.callback is not None and info.name is not None
        registered.setdefault(info.callback.__module__.rsplit(".", 1)[-1], set()).add(info.name)
    assert registered == {module: set(commands) for module, commands in COMMAND_MODULES.items()}


def test_a_named_command_registers_its_module_only() -> None:
    assert command_modules(["init", "--no-wait"]) == ["init_cmd"]
    assert command_modules(["--run-dir", "/run/x", "--log-format", "json", "status", "--json"]) == ["status_cmd"]
    assert command_modules(["modinfo", "/lib/modules/nvidia.ko"]) == ["modinfo_cmd"]


def test_help_no_command_or_a_typo_registers_every_module() -> None:
    everything = list(COMMAND_MODULES)
    assert command_modules([]) == everything
    assert command_modules(["--help"]) == everything
    assert command_modules(["stauts"]) == everything


def test_console_entry_runs_without_cyclic_gc_and_freezes_at_exit() -> None:
    script = (
        "import gc, sys\nsys.argv = ['nvidia-driver', 'version']\nfrom driver_container.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    print(gc.isenabled(), gc.get_freeze_count() > 0)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.split()[-2:] == ["False", "True"], done.stderr


def test_called_with_arguments_main_leaves_the_collector_alone() -> None:
    script = (
        "import gc\nfrom driver_container.cli import main\n"
        "try:\n    main(['version'])\nexcept SystemExit:\n    print(gc.isenabled(), gc.get_freeze_count())"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.split()[-2:] == ["True", "0"], done.stderr


def test_waiting_turns_the_collector_back_on() -> None:
    gc.disable()
    try:
        Shutdown().wait(0)
        assert gc.isenabled()
    finally:
        gc.enable()


def test_waiting_for_the_publishing_child_is_still_start_up() -> None:
    """The parent collecting the publishing child must not run collections (still starting)."""
    gc.disable()
    shutdown = Shutdown().install()
    try:
        assert run_in_child(lambda: "535.309.01", shutdown) == "535.309.01"
        assert not gc.isenabled()
        shutdown.wait(0)  # the wait for a signal afterwards is not
        assert gc.isenabled()
    finally:
        shutdown.restore()
        gc.enable()
