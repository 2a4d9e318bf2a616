"""``/proc/modules`` and the operator's module parameter files (pure parsers).

``/proc/modules`` lines are written by the kernel's ``m_show`` (kernel/module/procfs.c):
``name size refcnt users state address [(taints)]``, where ``users`` is a comma-terminated list,
``[permanent],`` for modules without an exit function, or ``-``; ``refcnt`` and ``users`` are both ``-``
on a kernel built without ``CONFIG_MODULE_UNLOAD``.
"""

from __future__ import annotations

from driver_container.base.records import NamedRecord
from driver_container.formats.kernel.modules_line import parse_module_line


class ProcModule(NamedRecord):
    name: str
    size: int
    refcnt: int | None  # None without CONFIG_MODULE_UNLOAD
    users: tuple[str, ...]
    state: str  # Live | Loading | Unloading
    taint: str  # e.g. "POE"; "" when untainted


def _parse_line(line: str) -> ProcModule | None:
    fields = parse_module_line(line)
    return None if fields is None else ProcModule(*fields)


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
