"""The tiers of docs/architecture.md as the code keeps them.

pyproject's import-linter contract is the source; ``lint-imports`` checks it in ``make check`` and CI. This
test adds what import-linter does not say: the architecture page names the contract's tiers in its order
(the ``tiers`` block and the "Modules" table), every import statement of the package keeps them (read from
the syntax tree, function-local and ``TYPE_CHECKING`` imports included, so the message names the line),
every boundary is one the imports really have, and the rule for reads (readers/ or inspect/) holds.
"""

from __future__ import annotations

import ast
import itertools
import re
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest
from helpers.support import REPO

import driver_container

PACKAGE = Path(driver_container.__file__).parent
ARCHITECTURE = REPO / "docs" / "architecture.md"


def contract_tiers() -> list[list[str]]:
    """The layers contract's tiers, top first, each a list of room names (``publish``, ``settings``)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    return [[name.strip().removeprefix("driver_container.") for name in tier.split("|")] for tier in layers]


def tier_of() -> dict[str, int]:
    return {room: index for index, tier in enumerate(contract_tiers()) for room in tier}


def room_of(relative: Path) -> str:
    """The room of a module path relative to the package: its directory, or the module's own name."""
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def imported_rooms(source: str) -> list[tuple[int, str]]:
    """(line, room) for every import of a ``driver_container.<room>`` anywhere in ``source``; the package
    itself (``from driver_container import project_version``) is no room."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "driver_container":
                names = [f"driver_container.{a.name}" for a in node.names]
        else:
            continue
        found += [(node.lineno, n.split(".")[1]) for n in names if n.startswith("driver_container.")]
    return found


def tier_violations(room: str, source: str, name: str, tiers: dict[str, int]) -> list[str]:
    """Imports of ``source`` (in ``room``) that reach its own tier's peers or a tier above."""
    return [
        f"{name}:{line} imports {other} (tier {tiers[other] + 1}) from {room} (tier {tiers[room] + 1})"
        for line, other in imported_rooms(source)
        if other in tiers and other != room and tiers[other] <= tiers[room]
    ]


def package_imports() -> dict[str, set[str]]:
    """room -> the rooms its modules import (every statement, lazy ones included)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.name in ("__init__.py", "__main__.py") and len(relative.parts) == 1:
            continue
        edges[room_of(relative)] |= {other for _line, other in imported_rooms(path.read_text())}
    return edges


def test_every_room_of_the_package_has_a_tier() -> None:
    rooms = {room_of(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if len(p.relative_to(PACKAGE).parts) > 1}
    rooms |= {p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_")}
    assert rooms == set(tier_of()), "pyproject.toml's tiers and the package's rooms differ"
    assert len(contract_tiers()) <= 12


def test_every_import_statement_keeps_the_tiers() -> None:
    tiers = tier_of()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) == 1 and relative.stem.startswith("_"):
            continue
        found += tier_violations(room_of(relative), path.read_text(), str(relative), tiers)
    assert not found, "; ".join(found)


@pytest.mark.parametrize(
    ("room", "planted"),
    [
        ("inspect", "from driver_container.publish.plan import plan\n"),
        ("inspect", "def f():\n    from driver_container.node import devices  # lazy\n"),
        ("inspect", "if TYPE_CHECKING:\n    import driver_container.node.persistenced\n"),
        ("inspect", "from driver_container import publish\n"),
        ("publish", "from driver_container.inspect.hoststate import HostState\n"),
        ("node", "from driver_container.findings import check\n"),
        ("lifecycle", "from driver_container.report.collect import collect_report\n"),
        ("base", "from driver_container.formats.numbers import parse_int\n"),
    ],
)
def test_the_rule_catches_a_planted_import(room: str, planted: str) -> None:
    assert tier_violations(room, planted, "planted.py", tier_of())


def test_tiers_below_are_allowed() -> None:
    source = "from driver_container.driverroot.manifest import Manifest\nfrom driver_container.readers import kmod\n"
    assert tier_violations("inspect", source, "ok.py", tier_of()) == []
    assert (
        tier_violations("report", "from driver_container.lifecycle.status import status_report\n", "ok.py", tier_of())
        == []
    )


def unused_boundaries(tiers: list[list[str]], edges: dict[str, set[str]]) -> list[str]:
    """Adjacent tiers where no room of the upper imports a room of the lower."""
    return [
        f"{' | '.join(upper)} imports nothing of {' | '.join(lower)}"
        for upper, lower in itertools.pairwise(tiers)
        if not any(edges.get(room, set()) & set(lower) for room in upper)
    ]


def test_every_boundary_is_one_the_imports_have() -> None:
    """Some room of each tier imports some room of the tier just below: a tier that imports nothing of the
    next would claim an order the code does not have (the two tiers could be one, as peers)."""
    unused = unused_boundaries(contract_tiers(), package_imports())
    assert not unused, "; ".join(unused)


def test_a_boundary_the_imports_lack_is_found() -> None:
    tiers = [["cli"], ["manager", "modprobe"], ["readers"], ["base"]]
    edges = {"cli": {"manager"}, "manager": {"base"}, "modprobe": {"base"}, "readers": {"base"}}
    assert unused_boundaries(tiers, edges) == ["manager | modprobe imports nothing of readers"]


def test_the_architecture_page_names_the_contracts_tiers() -> None:
    text = ARCHITECTURE.read_text()
    block = re.search(r"```tiers\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```tiers block"
    listed = [re.split(r"\s{2,}", line.strip())[0] for line in block.group(1).splitlines() if line.strip()]
    assert listed == [" | ".join(tier) for tier in contract_tiers()]
    table = dict(re.findall(r"^\| `([a-z_]+)/?` \| (\d+) \|", text, re.M))
    assert {room: int(tier) - 1 for room, tier in table.items()} == tier_of()


def test_a_reader_is_a_read_some_room_besides_inspect_needs() -> None:
    """docs/architecture.md, "Reading": a readers/ module only inspect imports belongs in inspect/."""
    users: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("driver_container.readers"):
                modules = (
                    [node.module]
                    if node.module != "driver_container.readers"
                    else [f"driver_container.readers.{a.name}" for a in node.names]
                )
                for module in modules:
                    users[module.split(".")[2]].add(room_of(relative))
    readers = {p.stem for p in (PACKAGE / "readers").glob("*.py") if p.stem != "__init__"}
    assert readers
    only_inspect = sorted(r for r in readers if users[r] - {"readers"} <= {"inspect"})
    assert not only_inspect, f"read only by inspect, so they belong in inspect/: {only_inspect}"
