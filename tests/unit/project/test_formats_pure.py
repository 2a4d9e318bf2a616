"""formats/ is pure: bytes or text in, records out. No module under it may open a file, list a directory,
start a process or reach a socket; that is readers/' job (docs/architecture.md).

import-linter only sees imports between the project's rooms; this reads every formats/ module's syntax tree
for the standard-library modules and calls that touch the host, so a ``Path(...).read_bytes()`` or an
``open(...)`` fails here even though it imports nothing of ours.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import driver_container

FORMATS = Path(driver_container.__file__).parent / "formats"

# Standard-library modules whose use is I/O, processes or the network. ``io`` is allowed for its in-memory
# streams only (below); ``mmap`` only for a type annotation (under TYPE_CHECKING).
IO_MODULES = frozenset(
    {
        "os",
        "subprocess",
        "shutil",
        "socket",
        "tempfile",
        "glob",
        "fcntl",
        "mmap",
        "ctypes",
        "select",
        "signal",
        "multiprocessing",
        "urllib",
        "http",
        "requests",
        "ssl",
        "pty",
        "resource",
    }
)
IN_MEMORY_IO = frozenset({"BytesIO", "StringIO"})
PURE_PATHS = frozenset({"PurePosixPath", "PurePath"})
# Calls that read or change a file system whatever object they are called on.
FILE_METHODS = frozenset(
    {
        "open",
        "read_bytes",
        "read_text",
        "write_bytes",
        "write_text",
        "iterdir",
        "glob",
        "rglob",
        "stat",
        "lstat",
        "exists",
        "is_file",
        "is_dir",
        "is_symlink",
        "unlink",
        "mkdir",
        "rmdir",
        "readlink",
        "resolve",
        "touch",
        "chmod",
        "rename",
        "replace",
        "samefile",
        "walk",
        "scandir",
        "listdir",
    }
)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Line numbers of statements inside ``if TYPE_CHECKING:`` blocks (imports there run nothing)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def _import_violations(node: ast.AST, typing_only: set[int]) -> list[str]:
    if getattr(node, "lineno", 0) in typing_only:
        return []
    if isinstance(node, ast.Import):
        return [f"imports {a.name}" for a in node.names if a.name.split(".")[0] in IO_MODULES]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        top = node.module.split(".")[0]
        names = {a.name for a in node.names}
        if top in IO_MODULES:
            return [f"imports from {node.module}"]
        if top == "io" and not names <= IN_MEMORY_IO:
            return [f"imports {sorted(names - IN_MEMORY_IO)} from io"]
        if top == "pathlib" and not names <= PURE_PATHS:
            return [f"imports {sorted(names - PURE_PATHS)} from pathlib"]
    return []


def _call_violations(node: ast.AST) -> list[str]:
    if not isinstance(node, ast.Call):
        return []
    func = node.func
    if isinstance(func, ast.Name) and func.id == "open":
        return ["calls open()"]
    if isinstance(func, ast.Attribute) and func.attr in FILE_METHODS:
        owner = func.value
        # str.replace and PurePosixPath text operations are not file access: only calls on something that
        # is not a string literal and not a known pure helper count.
        if func.attr == "replace" or (isinstance(owner, ast.Constant) and isinstance(owner.value, str)):
            return []
        return [f"calls .{func.attr}()"]
    is_io = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "io"
    if is_io and isinstance(func, ast.Attribute) and func.attr not in IN_MEMORY_IO:
        return [f"calls io.{func.attr}()"]
    return []


def io_violations(source: str, name: str = "<source>") -> list[str]:
    """Every place in ``source`` that would touch the host: ``name:line: what``."""
    tree = ast.parse(source)
    typing_only = _type_checking_only(tree)
    found = []
    for node in ast.walk(tree):
        for what in _import_violations(node, typing_only) + _call_violations(node):
            found.append(f"{name}:{getattr(node, 'lineno', 0)}: {what}")
    return found


def test_no_module_under_formats_touches_the_host() -> None:
    modules = sorted(FORMATS.rglob("*.py"))
    assert len(modules) > 20  # the walk found the room
    found = [v for path in modules for v in io_violations(path.read_text(), str(path.relative_to(FORMATS)))]
    assert not found, "formats/ must stay pure (move the I/O to readers/): " + "; ".join(found)


@pytest.mark.parametrize(
    "planted",
    [
        "def f(p):\n    return open(p).read()\n",
        "import os\n\ndef f(p):\n    return os.open(p, 0)\n",
        "from pathlib import Path\n\ndef f(p):\n    return Path(p).read_bytes()\n",
        "def f(root):\n    return root.read_text('x')\n",
        "def f(root):\n    return root.listdir('x')\n",
        "import subprocess\n",
        "import io\n\ndef f(p):\n    return io.open(p)\n",
        "from io import FileIO\n",
    ],
)
def test_the_checker_catches_a_planted_access(planted: str) -> None:
    assert io_violations(planted)


def test_the_checker_allows_what_formats_legitimately_does() -> None:
    allowed = (
        "from __future__ import annotations\nfrom io import BytesIO\nfrom pathlib import PurePosixPath\n"
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import mmap\n"
        "def f(b):\n    return BytesIO(b).read(), 'a-b'.replace('-', '_'), PurePosixPath('a') / 'b'\n"
    )
    assert io_violations(allowed) == []
