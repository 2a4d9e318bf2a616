"""tests/unit mirrors the package (docs/development.md, "Layout of the tests").

- A directory under tests/unit/ is named after a room of driver_container/ (a package: its path below
  tests/unit/ is a directory of driver_container/ with an ``__init__.py``), or is ``project/``: the tests of
  the repository as a whole (docs, manifests, release data, layout rules, the test suite's own rules).
- A test file directly in tests/unit/ tests one top-level module: ``test_<module>.py`` or
  ``test_<module>_<aspect>.py``.

So a room renamed or removed in the package cannot leave its tests in a directory that names nothing.
"""

from __future__ import annotations

from pathlib import Path

from helpers.support import REPO

import driver_container

PACKAGE = Path(driver_container.__file__).parent
UNIT = REPO / "tests" / "unit"
PROJECT = "project"  # the one directory that is not a room


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


def test_tests_unit_mirrors_the_package() -> None:
    assert mirror_violations(UNIT, PACKAGE) == []


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
