"""A finding (severity, code, message, fix) and the small rules every check shares."""

from __future__ import annotations

from typing import Literal

from driver_container.base.records import NamedRecord
from driver_container.formats.numbers import parse_c_int
from driver_container.formats.talos_config import module_config_snippet, snippet_heading

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")  # most severe first


TRUE_WORDS = {"y", "yes", "1", "true", "on"}


FALSE_WORDS = {"n", "no", "0", "false", "off"}


class Finding(NamedRecord):
    severity: Severity
    code: str
    message: str
    fix: str


def has_errors(findings: list[Finding] | tuple[Finding, ...]) -> bool:
    return any(f.severity == "error" for f in findings)


def talos_module_snippet(module: str, params: list[str], talos_version: str | None = None) -> str:
    """The machine-config text that makes Talos (machined) load ``module`` with ``params``, in the one form
    ``talos_version`` supports (driver_container/formats/talos_config.py)."""
    return snippet_heading(talos_version) + "\n" + module_config_snippet([(module, params)], talos_version)


def values_equal(requested: str, effective: str) -> bool:
    """Compare a requested parameter value with the kernel's printed one (Y/N for bool, decimal ints)."""
    a, b = requested.strip().strip("\"'"), effective.strip().strip("\"'")
    if a == b:
        return True
    if b in ("Y", "N") and a.lower() in TRUE_WORDS | FALSE_WORDS:
        return (a.lower() in TRUE_WORDS) == (b == "Y")
    number_a, number_b = parse_c_int(a), parse_c_int(b)
    return number_a is not None and number_a == number_b
