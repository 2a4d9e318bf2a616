"""``Problem``, the one form of a non-fatal problem, and ``noted``, the reader's way to keep one and go on.

Only ``os`` and base/errors.py are imported (the peermem probe's budget, as base/errors.py says).
"""

from __future__ import annotations

import os

from driver_container.base.errors import HostReadError

TYPE_CHECKING = False  # typing stays unimported at run time; type checkers read this as True
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    _T = TypeVar("_T")

_PathLike = str | os.PathLike[str]


class Problem:
    """A non-fatal problem: ``path`` is what it is about (a host or image path, a soname, a manifest
    entry, a module), ``message`` what is wrong with it. ``str()`` is the line shown: ``path: message``.
    Immutable and hashable (a frozen dataclass without importing ``dataclasses``: see the module doc)."""

    __slots__ = ("message", "path")
    path: str
    message: str

    def __init__(self, path: _PathLike, message: str) -> None:
        object.__setattr__(self, "path", os.fspath(path))
        object.__setattr__(self, "message", message)

    @classmethod
    def of(cls, exc: HostReadError) -> Problem:
        """A read error that the caller treats as non-fatal. Its message already starts with the path
        (``<path>: cannot open: ...``, ``<path>:<line>: ...``), so that is not repeated in ``str()``."""
        where = exc.path if exc.path is None or exc.line is None else f"{exc.path}:{exc.line}"
        if where is None:
            return cls("", exc.message)
        return cls(where, exc.message.removeprefix(f"{where}: "))

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def __repr__(self) -> str:
        return f"Problem(path={self.path!r}, message={self.message!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Problem) and (self.path, self.message) == (other.path, other.message)

    def __hash__(self) -> int:
        return hash((self.path, self.message))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Problem is immutable: cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Problem is immutable: cannot delete {name}")

    def __reduce__(self) -> tuple[type[Problem], tuple[str, str]]:
        return (Problem, (self.path, self.message))


def noted(problems: list[Problem], read: Callable[[], _T], default: _T) -> _T:
    """``read()``, or ``default`` with its HostReadError kept in ``problems`` (a reader that goes on)."""
    try:
        return read()
    except HostReadError as exc:
        problems.append(Problem.of(exc))
        return default
