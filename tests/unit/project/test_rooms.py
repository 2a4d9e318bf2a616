"""Reading and writing are peers (docs/architecture.md): ``inspect`` (read) imports neither ``publish`` nor
``node`` (apply), and those two import neither ``inspect`` nor ``findings`` (check).

pyproject's import-linter contracts say the same for ``lint-imports``; this test reads every import
statement itself (function-local ones and ``TYPE_CHECKING`` ones included), so the rule holds in the quick
lane (``make check``) and the message names the line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import driver_container

PACKAGE = Path(driver_container.__file__).parent
PEER_RULES = {
    "inspect": ("publish", "node"),
    "publish": ("inspect", "findings"),
    "node": ("inspect", "findings"),
}


def imported_rooms(source: str) -> list[tuple[int, str]]:
    """(line, room) for every import of a ``driver_container.<room>`` anywhere in ``source``."""
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


def room_violations(room: str, source: str, name: str) -> list[str]:
    forbidden = PEER_RULES[room]
    return [f"{name}:{line} imports {other}" for line, other in imported_rooms(source) if other in forbidden]


@pytest.mark.parametrize("room", sorted(PEER_RULES))
def test_reading_and_writing_rooms_do_not_import_each_other(room: str) -> None:
    modules = sorted((PACKAGE / room).rglob("*.py"))
    assert modules, f"no room {room}/"
    found = [v for path in modules for v in room_violations(room, path.read_text(), str(path.relative_to(PACKAGE)))]
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
    ],
)
def test_the_rule_catches_a_planted_import(room: str, planted: str) -> None:
    assert room_violations(room, planted, "planted.py")


def test_rooms_below_are_allowed() -> None:
    source = "from driver_container.driverroot.manifest import Manifest\nfrom driver_container.readers import kmod\n"
    assert room_violations("inspect", source, "ok.py") == []
