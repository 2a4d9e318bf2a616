"""Comments, docstrings and docs name only files and modules that exist (docs/development.md, "Stale references").

A reference is
- a path with a slash and a suffix of ours (``.py``, ``.md``, ``.sh``, ``.toml``, ``.json``, ``.yaml``,
  ``.yml``, ``.txt``) whose first part is a tracked top-level entry of the repository, a room of driver_container/ or
  a directory of tests/ (after any leading ``../`` of a Markdown link). It exists when it is found below the
  repository root, driver_container/ (a room-relative name), tests/, tests/unit/ or the referring file's own
  directory. Paths in upstream citations (NVIDIA's ``assets/state-driver/...``) begin with none of those
  names and are not checked;
- a bare file name ending in ``.py``: some tracked file has that name;
- a dotted ``driver_container.a.b``: its longest prefix that is a module exists, and the rest, if any,
  begins with a name that module defines or imports.

Scanned: every tracked text file but tests/fixtures/ (trees as the real systems show them) and CHANGELOG.md
(history names what was since removed); in a Python file only its comments and docstrings (its other strings
are data, such as the planted trees of these tests). A reference whose last part is one letter
(``docs/x.md``, ``driver_container.a.b``) is a placeholder.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from functools import cache
from pathlib import Path

from helpers.support import REPO

PACKAGE = "driver_container"
SKIPPED = ("tests/fixtures/", "CHANGELOG.md")
PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|sh|toml|json|yaml|yml|txt))\b")
DOTTED = re.compile(rf"\b{PACKAGE}(?:\.\w+)+")
# (referring file, reference): why it names something that does not exist.
ALLOWED = {
    ("driver_container/__init__.py", "driver_container.__version__"): "the package's PEP 562 __getattr__ answers it",
    ("docs/operator.md", "driver_container.__version__"): "the package's PEP 562 __getattr__ answers it",
}


def _prose(text: str) -> str:
    """The comments and docstrings of a Python source."""
    parts = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            parts.append(ast.get_docstring(node, clean=False) or "")
    return "\n".join(parts)


def _anchor_parts(tracked: str) -> list[str]:
    """The names a tracked file makes anchors: its top-level entry, and its room under the package or tests/."""
    parts = tracked.split("/")
    return parts[:2] if parts[0] in (PACKAGE, "tests") and len(parts) > 2 else parts[:1]


class References:
    """The stale references of the files of one tree (``repo``, with its package and tests/)."""

    def __init__(self, repo: Path, files: list[str]) -> None:
        self.repo, self.files = repo, files
        package, tests = repo / PACKAGE, repo / "tests"
        self.bases = [repo, package, tests, tests / "unit"]
        # Anchors come from the tracked files, never the working tree: a generated directory (.cache/, a
        # build's output) exists in one checkout and not in a fresh clone, so it must not decide a verdict.
        self.anchors = {part for f in files for part in _anchor_parts(f)}
        self.names = {Path(f).name for f in files}
        self.defined = cache(self._defined)

    def _defined(self, source: Path) -> set[str]:
        """The names a module defines or imports."""
        names = set()
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[0])
        return names

    def _path_exists(self, ref: str, referrer: Path) -> bool:
        if "/" not in ref:
            return not ref.endswith(".py") or ref in self.names
        if re.sub(r"^(\.\./)+", "", ref).split("/", maxsplit=1)[0] not in self.anchors:  # a link's ../
            return True
        return any((base / ref).exists() for base in (*self.bases, referrer.parent))

    def _dotted_exists(self, dotted: str) -> bool:
        parts, module = dotted.split(".")[1:], self.repo / PACKAGE
        while parts and ((module / parts[0]).is_dir() or (module / f"{parts[0]}.py").is_file()):
            module, parts = module / parts[0], parts[1:]
        if not parts:
            return True
        source = module / "__init__.py" if module.is_dir() else module.with_suffix(".py")
        return source.is_file() and parts[0] in self.defined(source)

    def _exists(self, ref: str, referrer: Path) -> bool:
        dotted = ref.startswith(f"{PACKAGE}.")
        if len(ref.rsplit(".", 1)[-1] if dotted else Path(ref).stem) == 1:  # a placeholder
            return True
        return self._dotted_exists(ref) if dotted else self._path_exists(ref, referrer)

    def stale(self) -> list[str]:
        found = []
        for name in self.files:
            path = self.repo / name
            if name.startswith(SKIPPED) or not path.is_file() or path.is_symlink():
                continue
            text = path.read_text(errors="replace")
            refs = [m.group(1) for m in PATH.finditer(text)] + [m.group(0) for m in DOTTED.finditer(text)]
            refs = [ref for ref in refs if not self._exists(ref, path)]
            prose = _prose(text) if refs and path.suffix == ".py" else text
            found += [f"{name}: {ref}" for ref in refs if ref in prose and (name, ref) not in ALLOWED]
        return found


def test_comments_and_docs_name_only_what_exists() -> None:
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True)
    assert References(REPO, tracked.stdout.splitlines()).stale() == []


def test_a_reference_to_a_file_or_module_that_does_not_exist_is_reported(tmp_path: Path) -> None:
    files = {
        "driver_container/shelf/__init__.py": "",
        "driver_container/shelf/box.py": '"""Reads shelf/box.py; see driver_container.shelf.box.BOX."""\nBOX = 1\n',
        "tests/unit/shelf/test_box.py": "# shelf/box.py, tests/unit/shelf/test_box.py, box.py\n"
        "TREE = {'shelf/gone.py': 'data, not a reference'}\n",
        "docs/shelf.md": "`driver_container/shelf/box.py`, [box](../driver_container/shelf/box.py), `docs/x.md`,"
        " `upstream/gone.py` (an upstream path), `.cache/follow/plan.json` (generated, untracked)\n",
        "tests/fixtures/hosts/README.md": "shelf/gone.py as the host has it\n",
        "CHANGELOG.md": "Removed shelf/gone.py.\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / ".cache").mkdir()  # a generated directory of this checkout only: never an anchor
    assert References(tmp_path, list(files)).stale() == []
    planted = {
        "driver_container/shelf/box.py": '"""Moved to shelf/crate.py; driver_container.shelf.crate, '
        'driver_container.shelf.box.LID."""\n',
        "tests/unit/shelf/test_box.py": "# tests/unit/test_box.py and gone.py\n",
        "docs/shelf.md": "`driver_container/box.py`, [box](../shelf/box.py)\n",
    }
    for name, text in planted.items():
        (tmp_path / name).write_text(text)
    assert References(tmp_path, list(files)).stale() == [
        "driver_container/shelf/box.py: shelf/crate.py",
        "driver_container/shelf/box.py: driver_container.shelf.crate",
        "driver_container/shelf/box.py: driver_container.shelf.box.LID",
        "tests/unit/shelf/test_box.py: tests/unit/test_box.py",
        "tests/unit/shelf/test_box.py: gone.py",
        "docs/shelf.md: driver_container/box.py",
        "docs/shelf.md: ../shelf/box.py",
    ]
