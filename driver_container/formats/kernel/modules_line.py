"""One ``/proc/modules`` line's shape, checked with ``str`` methods only (no ``re``, no dataclass).

The one definition of what a valid line is: ``modules.parse_proc_modules`` builds its records from it,
and the peermem liveness probe's glance (lifecycle/peermem_glance.py), whose floor is a bare interpreter
start, reads module names with it. Line format: see formats/kernel/modules.py.
"""

from __future__ import annotations

from driver_container.formats.numbers import parse_int, parse_uint

STATES = ("Live", "Loading", "Unloading")
# name, size, refcnt (None without CONFIG_MODULE_UNLOAD), users, state, taint ("" when untainted)
ModuleLine = tuple[str, int, int | None, tuple[str, ...], str, str]


def is_module_name(text: str) -> bool:
    """``[A-Za-z0-9_]+``: the characters the kernel keeps in a module name (dashes become ``_``)."""
    return text.isascii() and text.replace("_", "a").isalnum()


def parse_module_line(line: str) -> ModuleLine | None:
    """The fields of one line, or None when it does not have the kernel's shape."""
    fields = line.split()
    if len(fields) not in (6, 7) or not is_module_name(fields[0]):
        return None
    name, size_text, refcnt_text, users, state, _address = fields[:6]
    size = parse_uint(size_text)
    refcnt = None if refcnt_text == "-" else parse_int(refcnt_text)
    if size is None or state not in STATES or (refcnt is None and refcnt_text != "-"):
        return None
    taint = ""
    if len(fields) == 7:
        if not (fields[6].startswith("(") and fields[6].endswith(")")):
            return None
        taint = fields[6][1:-1]
    return name, size, refcnt, tuple(u for u in users.split(",") if u and u != "-"), state, taint
