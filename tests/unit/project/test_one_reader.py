"""One safe-read idiom (driver_container/base/fileread.py): no module opens a file for reading with its own
``O_NOFOLLOW``/``O_NONBLOCK`` flags, and none checks an fstat with ``S_ISREG`` itself.

Left to themselves: base/fileread.py; base/beneath.py, the opener below it (its flags are its callers'); and the
writers, which open for writing with their own checks (runtime/fsutil.py, staged.py, runner.py,
logfile.py, lock.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import driver_container

PACKAGE = Path(driver_container.__file__).parent
OPENERS = {"base/fileread.py", "base/beneath.py"}
WRITERS = {"runtime/fsutil.py", "runtime/staged.py", "runtime/runner.py", "runtime/logfile.py", "runtime/lock.py"}
READ_MARKS = {"O_NOFOLLOW", "O_NONBLOCK"}
# A flag set with one of these opens a directory, a path only, or for writing: not a file read.
NOT_A_READ = {"O_WRONLY", "O_RDWR", "O_PATH", "O_DIRECTORY", "O_CREAT", "O_APPEND", "O_TRUNC"}


def _flag_names(node: ast.expr) -> set[str]:
    """The ``os.O_*`` names an ``|``-combination of flags mentions."""
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr.startswith("O_")}


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _flag_sets(tree: ast.AST) -> list[ast.expr]:
    """The flag expressions handed to an opener (os.open, open_beneath, Root.open_resolved ...) or kept
    in a name for one; not those of other calls (os.pipe2)."""
    sets: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and "open" in _call_name(node):
            sets += [a for a in [*node.args, *(k.value for k in node.keywords)] if isinstance(a, ast.BinOp)]
        elif isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.BinOp):
            sets.append(node.value)
    return sets


def read_flag_sets(source: str) -> list[int]:
    """Lines of flag sets that open a file for reading with ``O_NOFOLLOW`` or ``O_NONBLOCK``."""
    lines = []
    for node in _flag_sets(ast.parse(source)):
        names = _flag_names(node)
        if names & READ_MARKS and not names & NOT_A_READ:
            lines.append(node.lineno)
    return lines


def regular_checks(source: str) -> list[int]:
    """Lines of ``S_ISREG`` in a module that also calls ``os.fstat``: a hand-written regular-file check."""
    tree = ast.parse(source)
    calls_fstat = any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "fstat" for n in ast.walk(tree)
    )
    if not calls_fstat:
        return []
    return [
        n.lineno
        for n in ast.walk(tree)
        if (isinstance(n, ast.Attribute) and n.attr == "S_ISREG") or (isinstance(n, ast.Name) and n.id == "S_ISREG")
    ]


def _modules() -> list[tuple[str, str]]:
    return [(str(p.relative_to(PACKAGE)), p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))]


def test_no_module_opens_a_file_for_reading_with_its_own_flags() -> None:
    strays = [f"{name}:{line}" for name, source in _modules() if name not in OPENERS for line in read_flag_sets(source)]
    assert not strays, f"open for reading through base/fileread.py (open_nofollow, open_below): {strays}"


def test_no_module_checks_fstat_for_a_regular_file_itself() -> None:
    strays = [
        f"{name}:{line}"
        for name, source in _modules()
        if name not in OPENERS | WRITERS
        for line in regular_checks(source)
    ]
    assert not strays, f"check the descriptor through base/fileread.py (regular_stat, refuse_irregular): {strays}"


# The hand-written copies this test replaced, as they were: each must be caught.
PLANTED_OPEN = """
import os
def read(path):
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
"""
PLANTED_FLAGS = """
import os
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
"""
PLANTED_BENEATH = """
import os
from driver_container.base.beneath import open_beneath
def read(root, inner):
    return open_beneath(root, inner, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
"""
PLANTED_RESOLVED = """
import os
def read(root, inner):
    fd, real = root.open_resolved(inner, os.O_RDONLY | os.O_NONBLOCK)
"""
PLANTED_CHECK = """
import os
import stat
def check(fd):
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise OSError("not a regular file")
"""
# What stays allowed: a directory walk, a write, an O_PATH check, a pipe, an lstat's type.
ALLOWED = """
import os
import stat
pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
fd = os.open("x", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
node = os.open("n", os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
regular = stat.S_ISREG(os.lstat("y").st_mode)
"""


def test_the_detectors_catch_the_copies_they_replaced() -> None:
    assert read_flag_sets(PLANTED_OPEN) == [4]
    assert read_flag_sets(PLANTED_FLAGS) == [3]
    assert read_flag_sets(PLANTED_BENEATH) == [5]
    assert read_flag_sets(PLANTED_RESOLVED) == [4]
    assert regular_checks(PLANTED_CHECK) == [5]
    assert read_flag_sets(ALLOWED) == [] and regular_checks(ALLOWED) == []
