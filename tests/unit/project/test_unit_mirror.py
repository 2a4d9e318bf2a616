"""tests/unit mirrors the package (docs/development.md, "Layout of the tests").

- A directory under tests/unit/ is named after a room of driver_container/ (a package: its path below
  tests/unit/ is a directory of driver_container/ with an ``__init__.py``), or is ``project/``: the tests of
  the repository as a whole (docs, manifests, release data, layout rules, the test suite's own rules).
- A test file directly in tests/unit/ tests one top-level module: ``test_<module>.py`` or
  ``test_<module>_<aspect>.py``.
- A test file sits in the room of its subject: the room of driver_container/ whose imported names it uses
  most (each use of a name imported from the room, annotations not counted; a fixture of its directory's
  conftest.py counts as a name of that room). The floor (base/ and the top-level modules: records to build,
  errors to expect) counts only where nothing above it is used, or in the floor's own tests. On a tie any of
  the rooms tied is its subject; a file that uses no name of the package is free.

So a room renamed or removed in the package cannot leave its tests in a directory that names nothing, and
a test cannot sit in a room it does not test.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from helpers.support import REPO

import driver_container

PACKAGE = Path(driver_container.__file__).parent
UNIT = REPO / "tests" / "unit"
PROJECT = "project"  # the one directory that is not a room
FLOOR = "base"  # with the top-level modules (room ""), the floor every room's tests use


def mirror_violations(unit: Path, package: Path) -> list[str]:
    """Each directory or top-level test file of ``unit`` that names no room or module of ``package``."""
    bad = []
    # Directories that hold Python files: a stale one holding only __pycache__ after a move is no test's home.
    directories = {p.parent for p in unit.rglob("*.py")} - {unit}
    for directory in sorted(directories):
        relative = directory.relative_to(unit)
        if relative.parts[0] == PROJECT:
            continue
        if not (package / relative / "__init__.py").is_file():
            bad.append(f"tests/unit/{relative.as_posix()}/ is no room of the package")
    modules = {p.stem for p in package.glob("*.py") if not p.stem.startswith("_")}
    for test in sorted(unit.glob("test_*.py")):
        stem = test.stem.removeprefix("test_")
        if not any(stem == m or stem.startswith(f"{m}_") for m in modules):
            bad.append(f"tests/unit/{test.name} tests no top-level module (rooms' tests go in their directory)")
    return bad


def _room_of(dotted: str, package: Path) -> str:
    """The deepest room (package directory) of ``package`` that holds ``dotted`` (driver_container.a.b.c)."""
    parts, room = dotted.split(".")[1:], ""
    for depth in range(1, len(parts) + 1):
        if not (package.joinpath(*parts[:depth]) / "__init__.py").is_file():
            break
        room = "/".join(parts[:depth])
    return room


def _imported_rooms(tree: ast.Module, package: Path) -> dict[str, str]:
    """Each local name the file imports from the package, with the room it comes from."""
    rooms: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package.name:
            for alias in node.names:
                rooms[alias.asname or alias.name] = _room_of(f"{node.module}.{alias.name}", package)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == package.name:
                    rooms[alias.asname or alias.name.split(".")[0]] = _room_of(alias.name, package)
    return rooms


def _local_fixtures(directory: Path) -> set[str]:
    conftest = directory / "conftest.py"
    if not conftest.is_file():
        return set()
    tree = ast.parse(conftest.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.decorator_list}


def subject_rooms(test: Path, unit: Path, package: Path) -> set[str]:
    """The rooms ``test`` uses most (see the module docstring); empty when it uses no name of the package."""
    tree = ast.parse(test.read_text())
    rooms = _imported_rooms(tree, package)
    directory = test.parent.relative_to(unit).as_posix()
    for name in _local_fixtures(test.parent):
        rooms.setdefault(name, directory)
    annotations = {
        id(n)
        for node in ast.walk(tree)
        for note in (getattr(node, "annotation", None), getattr(node, "returns", None))
        if isinstance(note, ast.expr)
        for n in ast.walk(note)
    }
    uses = Counter(
        rooms[n.id] for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in rooms and id(n) not in annotations
    )
    uses.update(rooms[a.arg] for a in ast.walk(tree) if isinstance(a, ast.arg) and a.arg in rooms)
    in_floor = directory == FLOOR or test.parent == unit
    above = Counter({room: count for room, count in uses.items() if room not in (FLOOR, "")})
    counted = uses if in_floor or not above else above
    most = max(counted.values(), default=0)
    return {room or "." for room, count in counted.items() if count == most}


def misplaced_tests(unit: Path, package: Path) -> list[str]:
    """Each test file of ``unit`` (outside project/) whose directory is not the room of its subject."""
    bad = []
    for test in sorted(unit.rglob("test_*.py")):
        directory = test.parent.relative_to(unit).as_posix()
        if directory.split("/")[0] == PROJECT:
            continue
        subjects = subject_rooms(test, unit, package)
        if subjects and directory not in subjects and not (directory == "." and subjects <= {".", FLOOR}):
            bad.append(f"tests/unit/{test.relative_to(unit).as_posix()} tests {', '.join(sorted(subjects))}")
    return bad


def test_tests_unit_mirrors_the_package() -> None:
    assert mirror_violations(UNIT, PACKAGE) == []


def test_each_test_file_sits_in_the_room_of_its_subject() -> None:
    assert misplaced_tests(UNIT, PACKAGE) == []


def test_a_directory_or_file_that_names_nothing_is_reported(tmp_path: Path) -> None:
    package, unit = tmp_path / "pkg", tmp_path / "unit"
    for room in ("formats", "formats/kmod", "node"):
        (package / room).mkdir(parents=True)
        (package / room / "__init__.py").touch()
    (package / "paths.py").touch()
    for test in ("formats/kmod/test_a.py", "node/test_b.py", "project/test_c.py", "test_paths_root.py"):
        (unit / test).parent.mkdir(parents=True, exist_ok=True)
        (unit / test).touch()
    assert mirror_violations(unit, package) == []
    (unit / "stale/__pycache__").mkdir(parents=True)  # left by a move: no Python file, no test
    (unit / "stale/__pycache__/test_d.cpython-311.pyc").touch()
    assert mirror_violations(unit, package) == []
    (unit / "host").mkdir()  # a room that does not exist
    (unit / "host/test_e.py").touch()
    (unit / "formats/kernel").mkdir()  # nor does this one, below one that does
    (unit / "formats/kernel/conftest.py").touch()
    (unit / "test_pathsfinder.py").touch()  # no module named so
    assert mirror_violations(unit, package) == [
        "tests/unit/formats/kernel/ is no room of the package",
        "tests/unit/host/ is no room of the package",
        "tests/unit/test_pathsfinder.py tests no top-level module (rooms' tests go in their directory)",
    ]


def test_a_test_file_outside_the_room_of_its_subject_is_reported(tmp_path: Path) -> None:
    package, unit = tmp_path / "driver_container", tmp_path / "unit"
    for room in ("base", "formats", "formats/kernel", "inspect", "findings"):
        (package / room).mkdir(parents=True)
        (package / room / "__init__.py").write_text("")
    tests = {
        # the subject is the room used most; the floor's records and errors do not count above it
        "findings/test_checks.py": "from driver_container.findings import check\n"
        "from driver_container.inspect.hoststate import inspect_host\n"
        "from driver_container.base.errors import E, F\n"
        "def test_a(state: inspect_host) -> None:\n    assert check(inspect_host()) and check(E, F, E, F)\n",
        # a tie: either room is its subject
        "inspect/test_tie.py": "from driver_container.findings import check\n"
        "from driver_container.inspect import hoststate\n"
        "def test_b() -> None:\n    assert check(hoststate)\n",
        # the floor's own tests count the floor
        "base/test_errors.py": "from driver_container.base.errors import E\nfrom driver_container.formats import p\n"
        "def test_c() -> None:\n    assert E(E) and p()\n",
        # a fixture of the directory's conftest.py is a name of that room
        "inspect/conftest.py": "import pytest\n@pytest.fixture\ndef host() -> None: ...\n",
        "inspect/test_fixture.py": "from driver_container.formats.kernel import parse\n"
        "def test_d(host: None) -> None:\n    assert parse(host) and host\n",
        "inspect/test_nothing.py": "def test_e() -> None:\n    assert True\n",  # uses no name: free
    }
    for name, text in tests.items():
        (unit / name).parent.mkdir(parents=True, exist_ok=True)
        (unit / name).write_text(text)
    assert misplaced_tests(unit, package) == []
    (unit / "formats").mkdir()
    (unit / "findings/test_checks.py").rename(unit / "formats/test_checks.py")
    (unit / "inspect/test_parse.py").write_text(
        "import driver_container.formats.kernel.mountinfo as m\nfrom driver_container.inspect.x import read\n"
        "def test_f() -> None:\n    assert m.parse(read()) == m.parse(b'')\n"
    )
    (unit / "base/test_records.py").write_text(  # the floor's test of a room above it
        "from driver_container.base.records import R\nfrom driver_container.inspect import y\n"
        "def test_g() -> None:\n    assert y(R) and y()\n"
    )
    assert misplaced_tests(unit, package) == [
        "tests/unit/base/test_records.py tests inspect",
        "tests/unit/formats/test_checks.py tests findings",
        "tests/unit/inspect/test_parse.py tests formats/kernel",
    ]
