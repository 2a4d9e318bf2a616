"""What each command imports (bench/imports.py measures it). Each module on the unchanged restart costs
start-up time on every GPU node, every restart; every other command imports only the rooms of the package
it uses (ROOMS). ``PYTHONPROFILEIMPORTTIME`` lists every import of the restart and of its forked publishing
child, if there were one (the flag is inherited); an unchanged restart forks none.

On CPython 3.11 creating a frozen dataclass costs ~1 ms (docs/development.md): the records on this path
are NamedRecords (base/records.py), so ``dataclasses`` itself must not be imported. Neither may the publisher,
pyelftools, the module loader, hashing or the thread pool: an unchanged root is recognised from its manifest, in
``init`` itself, so neither ``ctypes`` (PR_SET_PDEATHSIG of a child) nor ``pickle`` is needed either.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.hostenv import Host, make_host
from helpers.support import FIXTURES

VERSION = "595.91.07"
# Imported only when something is to be written, or never on Talos (modprobe/), or outside a cluster
# (the Kubernetes client), or when the project's version is asked for, or on NVSwitch nodes (Fabric
# Manager), or in a forked child (ctypes, pickle).
NOT_ON_AN_UNCHANGED_RESTART = (
    "typer",  # `init` as the DaemonSet runs it goes around typer (cli/init_entry.py)
    "driver_container.cli.app",
    "dataclasses",
    "hashlib",
    "ctypes",
    "pickle",
    "concurrent.futures",
    "elftools",
    "requests",
    "yaml",
    "importlib.metadata",  # the project's version: read when a verdict or --version needs it, not at import
    "email",
    "driver_container.publish.publisher",
    "driver_container.publish.copier",
    "driver_container.modprobe",
    "driver_container.readers.fabric",
    "driver_container.node.fabricmanager",
    "driver_container.node.persistenced",
)


def _imported(stderr: str) -> set[str]:
    """Module names from ``-X importtime`` lines: ``import time: self | cumulative | <indent>name``."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


def _restart(h: Host) -> set[str]:
    first = h.run("init", "--no-wait")
    assert first.returncode == 0, first.stderr
    again = h.run("init", "--no-wait", PYTHONPROFILEIMPORTTIME="1")
    assert again.returncode == 0, again.stderr
    assert "unchanged since its last publish" in again.stderr, again.stderr[-2000:]
    assert "publishing process" not in again.stderr, "an unchanged restart forked a publishing child"
    return _imported(again.stderr)


def test_an_unchanged_restart_imports_neither_dataclasses_nor_the_publisher(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    done = h.run("index-userspace", "--version", VERSION)  # as the image build does
    assert done.returncode == 0, done.stderr
    imported = _restart(h)
    assert "driver_container.inspect.hoststate" in imported  # the listing is complete: both sides verified
    assert "driver_container.publish.unchanged" in imported
    heavy = sorted(m for m in imported if any(m == n or m.startswith(n + ".") for n in NOT_ON_AN_UNCHANGED_RESTART))
    assert heavy == [], f"an unchanged restart imports {heavy}"


# What typer (and its click) import, so not in the list above, but nothing of the package below the CLI
# needs: the restart skips typer (cli/init_entry.py), so it imports none of them (bench/README.md).
NOT_BELOW_THE_CLI = ("typer", "datetime", "inspect", "uuid", "platform", "difflib", "gettext")
RESTART_CLI = ("cli/init_entry.py",)  # the restart's entry, which cli.main calls for ``init`` without typer


def _project_imports(module: Path) -> set[str]:
    """The driver_container modules ``module`` imports at its top (not the CLI's own)."""
    names = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "driver_container":
            names.add(node.module)
            for alias in node.names:  # ``from driver_container.lifecycle import init``: a module
                sub = PACKAGE.parent.joinpath(*node.module.split("."), alias.name)
                if sub.with_suffix(".py").is_file() or (sub / "__init__.py").is_file():
                    names.add(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("driver_container.")}
    return {n for n in names if not n.startswith("driver_container.cli")}


def test_the_restarts_modules_below_the_cli_import_no_typer_nor_what_typer_brings() -> None:
    below = sorted(set().union(*(_project_imports(PACKAGE / m) for m in RESTART_CLI)))
    assert "driver_container.lifecycle.init" in below, below  # the listing reaches the restart's modules
    script = f"import sys\nimport {', '.join(below)}\nprint('\\n'.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    imported = set(done.stdout.split())
    never = (*NOT_ON_AN_UNCHANGED_RESTART, *NOT_BELOW_THE_CLI)
    heavy = sorted(m for m in imported if any(m == n or m.startswith(n + ".") for n in never))
    assert heavy == [], f"the restart's modules below the CLI import {heavy}"


# The rooms of driver_container/ each command may import (an entry ``room.module`` allows that module of the
# room, and its package, only); the modules of each room it must not (bench/README.md has the measured sets).
PACKAGE = FIXTURES.parent.parent / "driver_container"
EVERY_ROOM = tuple(
    sorted(
        p.stem
        for p in PACKAGE.iterdir()
        if (p / "__init__.py").is_file() or (p.suffix == ".py" and not p.stem.startswith("__"))
    )
)  # a new room is in none of the lists below until one allows it
READ_ONLY_ROOMS = ("base", "cli", "driverroot", "findings", "formats", "inspect", "lifecycle", "logs", "readers")
ROOMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # command -> (rooms it may import, never)
    # every command module is registered for --help (cli.command_modules), each importing its own rooms
    "--help": (tuple(r for r in EVERY_ROOM if r not in ("manager", "modprobe")), ("requests", "yaml", "elftools")),
    "init --no-wait": (
        tuple(r for r in EVERY_ROOM if r not in ("manager", "modprobe", "report")),
        ("requests", "yaml", "elftools", "driver_container.kube.client", "driver_container.publish.publisher"),
    ),
    "status": ((*READ_ONLY_ROOMS, "runtime", "settings"), ("requests", "yaml", "elftools")),
    "version": (
        ("base", "cli", "formats", "logs", "readers", "inspect.platform", "settings"),
        ("requests", "yaml", "elftools"),
    ),
    "modinfo": (
        ("base", "cli", "formats", "logs", "readers", "inspect.platform", "settings"),
        ("requests", "yaml", "elftools"),
    ),
    "probe_nvidia_peermem": (("base", "cli", "formats", "lifecycle.peermem_glance"), ("typer", "logging")),
    "bug-report --help": ((*READ_ONLY_ROOMS, "report", "runtime", "settings"), ("requests", "yaml", "elftools")),
    "driver-manager --help": (
        tuple(r for r in EVERY_ROOM if r not in ("lifecycle", "modprobe", "node", "publish", "report")),
        ("elftools",),
    ),
}
COMMAND_MODULE = {
    "--help": "driver_container.cli.status_cmd",
    "init --no-wait": "driver_container.publish.unchanged",
    "status": "driver_container.cli.status_cmd",
    "version": "driver_container.cli.modinfo_cmd",
    "modinfo": "driver_container.readers.kmod",
    "probe_nvidia_peermem": "driver_container.lifecycle.peermem_glance",
    "bug-report --help": "driver_container.cli.bugreport_cmd",
    "driver-manager --help": "driver_container.cli.manager_cmd",
}
MODULE_FILE = FIXTURES / "hosts/talos-1.11-kmod-535/host/usr/lib/modules/6.12.43-talos/extras/nvidia.ko"


def outside_rooms(imported: set[str], rooms: tuple[str, ...], never: tuple[str, ...]) -> list[str]:
    """The modules of ``imported`` outside ``rooms`` (see ROOMS) or under one of ``never``."""

    def allowed(module: str) -> bool:
        parts = module.split(".")
        if parts[0] != "driver_container" or len(parts) == 1:
            return True
        for room in rooms:
            entry = ["driver_container", *room.split(".")]
            if parts[: len(entry)] == entry or parts == entry[: len(parts)]:
                return True
        return False

    banned = [m for m in imported if any(m == n or m.startswith(n + ".") for n in never)]
    return sorted({*banned, *(m for m in imported if not allowed(m))})


# The console script (``nvidia-driver`` or ``driver-manager``) writing sys.modules at exit: ``-X importtime``
# does not list what importlib.import_module imports itself (cli's command modules), sys.modules has all.
LISTING = (
    "import atexit, os, sys\n"
    "atexit.register(lambda: open(os.environ['IMPORTS_OUT'], 'w').write('\\n'.join(sorted(sys.modules))))\n"
    "from driver_container.cli import {entry}\n"
    "sys.exit({entry}())\n"
)


def _command_argv(command: str) -> tuple[list[str], dict[str, str]]:
    entry, args = ("manager_main", ["--help"]) if command == "driver-manager --help" else ("main", command.split())
    if command == "modinfo":
        args.append(str(MODULE_FILE))
    extra = {"PROCFS_ROOT": str(FIXTURES / "node/peermem-loaded/proc")} if command == "probe_nvidia_peermem" else {}
    return [sys.executable, "-c", LISTING.format(entry=entry), *args], extra


def test_outside_rooms_names_a_planted_module_of_another_room() -> None:
    rooms, never = ROOMS["version"]
    assert outside_rooms({"driver_container.inspect", "driver_container.inspect.platform"}, rooms, never) == []
    planted = {"driver_container.inspect.hoststate", "driver_container.publish", "requests.adapters", "json"}
    assert outside_rooms(planted, rooms, never) == sorted(planted - {"json"})
    assert set(EVERY_ROOM) >= {"base", "cli", "inspect", "publish"}  # the rooms are read from the package


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Host:
    """A fixture host after a first publish: ``init --no-wait`` on it is the unchanged restart."""
    h = make_host(tmp_path_factory.mktemp("rooms") / "h")
    first = h.run("init", "--no-wait")
    assert first.returncode == 0, first.stderr
    return h


@pytest.mark.parametrize("command", list(ROOMS))
def test_each_command_imports_only_its_rooms(published: Host, command: str) -> None:
    argv, extra = _command_argv(command)
    listing = published.base / "imports.txt"
    env = {**published.env, **extra, "IMPORTS_OUT": str(listing)}
    ran = subprocess.run(argv, env=env, cwd=published.base, capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    imported = set(listing.read_text().split())
    # the listing is complete: the command's own module is in it
    assert COMMAND_MODULE[command] in imported, ran.stderr[-2000:]
    rooms, never = ROOMS[command]
    assert outside_rooms(imported, rooms, never) == [], f"{command} imports these beyond its rooms"
