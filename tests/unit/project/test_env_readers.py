"""One configuration reader: no module of driver_container/ reads the environment itself, but settings/ and
the exceptions docs/configuration.md names ("Every variable"). Read from each module's syntax tree."""

from __future__ import annotations

import ast
from pathlib import Path

import typer
from helpers.support import REPO

from driver_container.cli import _register_commands, manager_cmd
from driver_container.cli.app import app as driver_app
from driver_container.settings import variables

PACKAGE = REPO / "driver_container"
READER = "settings/"
# The documented exceptions: the probe's floor, the runner's children, bug-report's allow-listed copy.
EXCEPTIONS = {
    "lifecycle/peermem_glance.py": "the peermem probe's first glance reads PROCFS_ROOT (a bare interpreter's floor)",
    "runtime/runner.py": "hands this process's environment (and PATH) to its children",
    "report/environment.py": "copies the allow-listed names into a bug report",
}


def environment_reads(source: str) -> list[int]:
    """Lines that read the process environment: ``os.environ``, ``os.getenv``/``os.getenvb``, ``os.environb``,
    or those names imported from ``os``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in {"environ", "environb", "getenv", "getenvb"}
        ) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(alias.name in {"environ", "environb", "getenv", "getenvb"} for alias in node.names)
        ):
            lines.append(node.lineno)
    return sorted(lines)


def _offenders(files: list[tuple[str, str]]) -> list[str]:
    return [
        f"{name}:{line}"
        for name, source in files
        if not name.startswith(READER) and name not in EXCEPTIONS
        for line in environment_reads(source)
    ]


def _package() -> list[tuple[str, str]]:
    return [(str(p.relative_to(PACKAGE)), p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))]


def test_only_the_reader_reads_the_environment() -> None:
    assert _offenders(_package()) == []


def test_the_exceptions_still_read_it() -> None:
    """A listed exception that no longer reads the environment is dropped from the list (and the docs)."""
    files = dict(_package())
    assert [name for name in EXCEPTIONS if not environment_reads(files[name])] == []
    assert any(environment_reads(source) for name, source in files.items() if name.startswith(READER))


def test_the_scan_can_fail(tmp_path: Path) -> None:
    planted = [
        ("kube/x.py", "import os\nhost = os.environ.get('KUBERNETES_SERVICE_HOST')\n"),
        ("cli/y.py", "import os\n\n\ndef f():\n    return os.getenv('VERBOSE')\n"),
        ("manager/z.py", "from os import environ as e\n"),
        ("settings/ok.py", "import os\nx = os.environ\n"),
        ("runtime/runner.py", "import os\nx = dict(os.environ)\n"),
    ]
    assert _offenders(planted) == ["kube/x.py:2", "cli/y.py:5", "manager/z.py:1"]


def _envvars(app: typer.Typer) -> set[str]:
    _register_commands()
    command = typer.main.get_command(app)
    params = [*command.params, *(p for c in getattr(command, "commands", {}).values() for p in c.params)]
    return {env for p in params for env in ([p.envvar] if isinstance(p.envvar, str) else p.envvar or [])}


def test_typer_resolves_no_declared_variable() -> None:
    """A variable is resolved by the reader or by typer's envvar (the roots), never both."""
    assert _envvars(driver_app) & set(variables.names()) == set()
    assert _envvars(manager_cmd.app) & set(variables.names()) == set()
