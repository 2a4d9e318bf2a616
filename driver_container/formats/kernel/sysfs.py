"""``/sys/module/<name>/``: what the kernel exposes about one module.

Kernel facts (kernel/params.c, kernel/module/sysfs.c): ``initstate`` (``live``/``coming``/``going``),
``refcnt``, ``taint`` and ``holders/`` exist only for loadable modules; built-in code gets a directory
only when it has a ``version`` or parameters (``version`` alone = built-in). ``version`` and
``srcversion`` exist only when the module declares them; ``parameters/<p>`` only for parameters with
non-zero permissions (NVIDIA's ``NVreg_*`` are 0, see nvidia_proc.py).
"""

from __future__ import annotations

from typing import NamedTuple

from driver_container.errors import HostReadError
from driver_container.formats.numbers import parse_int
from driver_container.paths import Root

SMALL = 64 * 1024  # sysfs attributes are at most one page


class SysfsModule(NamedTuple):
    name: str
    present: bool  # /sys/module/<name> exists
    initstate: str | None
    refcnt: int | None
    version: str | None
    srcversion: str | None
    taint: str | None
    holders: tuple[str, ...]
    parameters: dict[str, str]
    problems: tuple[str, ...] = ()

    @property
    def loadable_loaded(self) -> bool:
        return self.initstate is not None

    @property
    def builtin(self) -> bool:
        """A directory without ``initstate`` is built-in code (no loadable module has it missing)."""
        return self.present and self.initstate is None


def _attr(root: Root, inner: str, problems: list[str]) -> str | None:
    try:
        text = root.read_text_or_none(inner, limit=SMALL)
    except HostReadError as exc:
        problems.append(exc.message)
        return None
    return None if text is None else text.strip()


def _list(root: Root, inner: str, problems: list[str]) -> list[str]:
    try:
        return root.listdir(inner)
    except HostReadError as exc:
        problems.append(exc.message)
        return []


def read_sysfs_module(sys_root: Root, name: str, *, with_parameters: bool = True) -> SysfsModule:
    """Read ``module/<name>`` below the sysfs root; unreadable attributes are reported in ``problems``."""
    base = f"module/{name}"
    problems: list[str] = []
    try:
        present = sys_root.is_dir(base)
    except HostReadError as exc:
        return SysfsModule(name, False, None, None, None, None, None, (), {}, problems=(exc.message,))
    if not present:
        return SysfsModule(name, False, None, None, None, None, None, (), {})
    refcnt_text = _attr(sys_root, f"{base}/refcnt", problems)
    refcnt: int | None = None
    if refcnt_text is not None:
        refcnt = parse_int(refcnt_text.strip())
        if refcnt is None:
            problems.append(f"{sys_root.resolve(base + '/refcnt')}: not a number: {refcnt_text[:40]!r}")
    parameters: dict[str, str] = {}
    if with_parameters:
        for param in _list(sys_root, f"{base}/parameters", problems):
            value = _attr(sys_root, f"{base}/parameters/{param}", problems)
            if value is not None:
                parameters[param] = value
    return SysfsModule(
        name=name,
        present=True,
        initstate=_attr(sys_root, f"{base}/initstate", problems),
        refcnt=refcnt,
        version=_attr(sys_root, f"{base}/version", problems),
        srcversion=_attr(sys_root, f"{base}/srcversion", problems),
        taint=_attr(sys_root, f"{base}/taint", problems),
        holders=tuple(_list(sys_root, f"{base}/holders", problems)),
        parameters=parameters,
        problems=tuple(problems),
    )
