"""``/sys/module/<name>/``: what the kernel exposes about one module (read by inspect/sysfs.py).

Kernel facts (kernel/params.c, kernel/module/sysfs.c): ``initstate`` (``live``/``coming``/``going``),
``refcnt``, ``taint`` and ``holders/`` exist only for loadable modules; built-in code gets a directory
only when it has a ``version`` or parameters (``version`` alone = built-in). ``version`` and
``srcversion`` exist only when the module declares them; ``parameters/<p>`` only for parameters with
non-zero permissions (NVIDIA's ``NVreg_*`` are 0, see nvidia_proc.py).
"""

from __future__ import annotations

from pathlib import PurePosixPath

from driver_container.base.problems import Problem
from driver_container.base.records import NamedRecord

SMALL = 64 * 1024  # sysfs attributes are at most one page
# The firmware loader's search path (drivers/base/firmware_loader/main.c, module_param_string "path"): read by
# inspect/firmware.py, written by node/firmware.py.
FIRMWARE_PATH_PARAM = PurePosixPath("module/firmware_class/parameters/path")


class SysfsModule(NamedRecord):
    name: str
    present: bool  # /sys/module/<name> exists
    initstate: str | None
    refcnt: int | None
    version: str | None
    srcversion: str | None
    taint: str | None
    holders: tuple[str, ...]
    parameters: dict[str, str]
    problems: tuple[Problem, ...] = ()

    @property
    def loadable_loaded(self) -> bool:
        return self.initstate is not None

    @property
    def builtin(self) -> bool:
        """A directory without ``initstate`` is built-in code (no loadable module has it missing)."""
        return self.present and self.initstate is None
