"""Which files the code under test opens, seen through Python's audit hooks (PEP 578): every ``open``,
``os.open`` included, raises an ``open`` audit event with the path. Nothing is patched: the code runs
as in production and the hook only records.

A hook cannot be removed once added, so one is installed on first use and records only while an
``opened_paths()`` block is active.

A name without a slash is an open relative to a directory descriptor (one component of a walk that
``driver_container/base/beneath.py`` announces as a whole path beforehand): not recorded, so each file read
below a root is recorded once, by its full path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_RECORDERS: list[list[str]] = []
_INSTALLED: list[bool] = []  # non-empty once the hook is added


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not _RECORDERS or not args:
        return
    path = args[0]
    if isinstance(path, str | bytes | os.PathLike):
        name = os.fsdecode(path)
        if "/" not in name:
            return
        for recorder in _RECORDERS:
            recorder.append(name)


@contextmanager
def opened_paths() -> Iterator[list[str]]:
    """Yield the list of paths opened inside the block (in order, repeats kept)."""
    if not _INSTALLED:
        sys.addaudithook(_hook)
        _INSTALLED.append(True)
    recorder: list[str] = []
    _RECORDERS.append(recorder)
    try:
        yield recorder
    finally:
        _RECORDERS.remove(recorder)


# For a child process (python -c): the same hook, writing each path that contains one of the
# comma-separated OPENED_MATCH words as a line to the already open fd OPENED_FD (no open of its own, so
# it never records itself; a forked child inherits both).
CHILD_PRELUDE = """
import os, sys
_fd, _words = int(os.environ["OPENED_FD"]), os.environ["OPENED_MATCH"].split(",")
def _opened(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        name = os.fsdecode(args[0])
        if "/" in name and any(w in name for w in _words):
            os.write(_fd, (name + "\\n").encode())
sys.addaudithook(_opened)
"""
