"""docs/troubleshooting.md must document every finding code and every error class the package defines.

The codes are read from the source of findings/ (there is no registry: each ``Finding(...)`` call names its
code as a literal), the classes by importing every module and walking ``DriverContainerError`` subclasses,
so a new code or class without a doc entry fails here.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

from helpers.support import REPO

import driver_container
from driver_container.base.errors import DriverContainerError

DOC = REPO / "docs" / "troubleshooting.md"
FINDINGS = Path(driver_container.__file__).parent / "findings"  # the package: every module of it


def _findings_source() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(FINDINGS.glob("*.py")))


# A findings-table row starts with the code; an error class has its own heading.
_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]+)` \|", re.MULTILINE)
_HEADING = re.compile(r"^#{2,3} `(\w+)`", re.MULTILINE)


def finding_codes(source: str) -> set[str]:
    """The code (second argument) of every ``Finding(...)`` call; a non-literal code fails the test."""
    codes: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Finding":
            code = node.args[1] if len(node.args) > 1 else next(k.value for k in node.keywords if k.arg == "code")
            assert isinstance(code, ast.Constant) and isinstance(code.value, str), (
                f"findings.py:{node.lineno}: finding code is not a string literal; extend this test"
            )
            codes.add(code.value)
    return codes


def _all_subclasses() -> list[type[DriverContainerError]]:
    """DriverContainerError and every subclass, after importing every module of the package."""
    for info in pkgutil.walk_packages(driver_container.__path__, prefix="driver_container."):
        if not info.name.endswith("__main__"):  # importing __main__ would run the CLI
            importlib.import_module(info.name)
    out: list[type[DriverContainerError]] = []
    pending = [DriverContainerError]
    while pending:
        cls = pending.pop()
        out.append(cls)
        pending.extend(cls.__subclasses__())
    return out


def error_classes() -> set[str]:
    """Names of the error classes defined in the package (not test doubles defined elsewhere)."""
    return {c.__name__ for c in _all_subclasses() if c.__module__.startswith("driver_container.")}


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_every_finding_code_is_documented() -> None:
    codes = finding_codes(_findings_source())
    assert len(codes) >= 20  # guards the extraction itself
    missing = sorted(codes - set(_ROW.findall(_doc())))
    assert not missing, f"finding codes without a row in {DOC.name}: {missing}"


def test_documented_codes_exist() -> None:
    stale = sorted(set(_ROW.findall(_doc())) - finding_codes(_findings_source()))
    assert not stale, f"{DOC.name} documents codes findings.py never emits: {stale}"


def test_every_error_class_is_documented() -> None:
    classes = error_classes()
    assert {"DriverContainerError", "UsageError", "LdCacheFormatError", "ElfFormatError"} <= classes
    missing = sorted(classes - set(_HEADING.findall(_doc())))
    assert not missing, f"error classes without a section in {DOC.name}: {missing}"


def test_documented_error_classes_exist() -> None:
    stale = sorted(set(_HEADING.findall(_doc())) - error_classes())
    assert not stale, f"{DOC.name} has sections for classes that do not exist: {stale}"


def test_exit_codes_in_headings_match_classes() -> None:
    # Every class heading says "exit N"; it must be the class's exit_code.
    by_name = {c.__name__: c for c in _all_subclasses()}
    stated = re.findall(r"^#{2,3} `(\w+)`.*?\bexit (\d+)", _doc(), re.MULTILINE)
    assert len(stated) == len(_HEADING.findall(_doc())), "a class heading does not state its exit code"
    for name, code in stated:
        actual = by_name[name].exit_code
        assert actual == int(code), f"{name}: {DOC.name} says exit {code}, the class has {actual}"
