"""``/sys/module/<name>/`` read below a sysfs root into a ``SysfsModule`` (formats/kernel/sysfs.py)."""

from __future__ import annotations

from driver_container.base.errors import HostReadError
from driver_container.base.problems import Problem, noted
from driver_container.base.resolver import Root
from driver_container.formats.kernel.sysfs import SMALL, SysfsModule
from driver_container.formats.numbers import parse_int


class _ModuleDir:
    """Reads attributes of one ``module/<name>`` directory and keeps what it could not read."""

    def __init__(self, root: Root, base: str) -> None:
        self.root, self.base = root, base
        self.problems: list[Problem] = []

    def attr(self, name: str) -> str | None:
        text = noted(self.problems, lambda: self.root.read_text_or_none(f"{self.base}/{name}", limit=SMALL), None)
        return None if text is None else text.strip()

    def entries(self, name: str) -> list[str]:
        return noted(self.problems, lambda: self.root.listdir(f"{self.base}/{name}"), [])

    def number(self, name: str) -> int | None:
        text = self.attr(name)
        number = None if text is None else parse_int(text)
        if text is not None and number is None:
            where = self.root.resolve(f"{self.base}/{name}")
            self.problems.append(Problem(where, f"not a number: {text[:40]!r}"))
        return number


def read_sysfs_module(sys_root: Root, name: str, *, with_parameters: bool = True) -> SysfsModule:
    """Read ``module/<name>`` below the sysfs root; unreadable attributes are reported in ``problems``."""
    base = f"module/{name}"
    try:
        present = sys_root.is_dir(base)
    except HostReadError as exc:
        return SysfsModule(name, False, None, None, None, None, None, (), {}, problems=(Problem.of(exc),))
    if not present:
        return SysfsModule(name, False, None, None, None, None, None, (), {})
    found = _ModuleDir(sys_root, base)
    refcnt = found.number("refcnt")
    parameters: dict[str, str] = {}
    if with_parameters:
        for param in found.entries("parameters"):
            value = found.attr(f"parameters/{param}")
            if value is not None:
                parameters[param] = value
    return SysfsModule(
        name=name,
        present=True,
        initstate=found.attr("initstate"),
        refcnt=refcnt,
        version=found.attr("version"),
        srcversion=found.attr("srcversion"),
        taint=found.attr("taint"),
        holders=tuple(found.entries("holders")),
        parameters=parameters,
        problems=tuple(found.problems),
    )
