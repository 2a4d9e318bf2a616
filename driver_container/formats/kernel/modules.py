"""``/proc/modules`` and the operator's module parameter files (pure parsers).

``/proc/modules`` lines are written by the kernel's ``m_show`` (kernel/module/procfs.c):
``name size refcnt users state address [(taints)]``, where ``users`` is a comma-terminated list,
``[permanent],`` for modules without an exit function, or ``-``; ``refcnt`` and ``users`` are both ``-``
on a kernel built without ``CONFIG_MODULE_UNLOAD``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from driver_container.formats.numbers import parse_int, parse_uint

_NAME = re.compile(r"[A-Za-z0-9_]+")
_STATES = ("Live", "Loading", "Unloading")


@dataclass(frozen=True)
class ProcModule:
    name: str
    size: int
    refcnt: int | None  # None without CONFIG_MODULE_UNLOAD
    users: tuple[str, ...]
    state: str  # Live | Loading | Unloading
    taint: str  # e.g. "POE"; "" when untainted


def _parse_line(line: str) -> ProcModule | None:
    fields = line.split()
    if len(fields) not in (6, 7) or not _NAME.fullmatch(fields[0]):
        return None
    name, size_text, refcnt_text, users, state, _address = fields[:6]
    size = parse_uint(size_text)
    refcnt = None if refcnt_text == "-" else parse_int(refcnt_text)
    if size is None or state not in _STATES or (refcnt is None and refcnt_text != "-"):
        return None
    taint = ""
    if len(fields) == 7:
        if not (fields[6].startswith("(") and fields[6].endswith(")")):
            return None
        taint = fields[6][1:-1]
    user_names = tuple(u for u in users.split(",") if u and u != "-")
    return ProcModule(
        name=name,
        size=size,
        refcnt=refcnt,
        users=user_names,
        state=state,
        taint=taint,
    )


def parse_proc_modules(text: str, *, rejects: list[str] | None = None) -> list[ProcModule]:
    """Modules listed in ``/proc/modules``; lines that do not have the kernel's shape are skipped
    (and appended to ``rejects`` when given), so one odd line never hides the nvidia entries."""
    modules: list[ProcModule] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        module = _parse_line(line)
        if module is None:
            if rejects is not None:
                rejects.append(line[:200])
            continue
        modules.append(module)
    return modules
