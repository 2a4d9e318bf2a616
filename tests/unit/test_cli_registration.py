"""Only the named command's module is registered (cli.command_modules): the table must match the modules."""

from __future__ import annotations

import importlib

from driver_container.cli import COMMAND_MODULES, command_modules
from driver_container.cli.app import app


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
