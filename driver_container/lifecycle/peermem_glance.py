"""The peermem liveness probe's first look at /proc/modules, with ``os`` calls only (through base/fileread.py).

gpu-operator runs ``nvidia-driver probe_nvidia_peermem`` every 30 s on every GPU node with a peermem
sidecar (assets/state-driver/0500_daemonset.yaml, ``nvidia-peermem-ctr`` livenessProbe). Its floor is a
bare interpreter start (``python -c pass``, ~20 ms); importing ``pathlib``, ``dataclasses`` and
``logging`` alone costs more than that (bench/startup.py). So the common answers come from here:
the probe passes when /proc/modules lists no ``mlx5_core``, or lists ``nvidia_peermem``. Anything else
(unreadable, not a regular file, too big, a line not in /proc/modules' format, mlx5_core without
nvidia_peermem) is None: ``peermem.probe`` then decides with the full readers and says why.
"""

from __future__ import annotations

import os

from driver_container.base.fileread import open_nofollow, read_up_to, regular_stat
from driver_container.formats.kernel.modules_line import parse_module_line

# The same facts as paths.HOST_ROOTS / HostPaths.procfs_root (tests/unit/lifecycle/test_peermem_glance.py
# checks that they agree): importing paths would cost what this module exists to save.
PROCFS_ENV = "PROCFS_ROOT"
PROCFS_DEFAULT = "/proc"
MLX5 = "mlx5_core"
PEERMEM = "nvidia_peermem"
MODULES_LIMIT = 4 << 20  # as peermem.probe's bounded read; a real /proc/modules is a few KiB


def procfs_root(environ: os._Environ[str] | dict[str, str] | None = None) -> str:
    """PROCFS_ROOT as HostPaths.from_env reads it (empty means the default), from this process's environment
    unless given: the one reader outside settings/, for the probe's floor (docs/configuration.md). Not typed
    ``Mapping``: ``collections.abc`` alone costs a tenth of the probe's floor."""
    return (os.environ if environ is None else environ).get(PROCFS_ENV) or PROCFS_DEFAULT


def passes_at_a_glance(procfs: str) -> bool | None:
    """True when ``procfs``/modules alone shows the probe passes; None when ``peermem.probe`` must decide."""
    data = _read_modules(os.path.join(procfs, "modules"))
    if data is None:
        return None
    text = data.decode("utf-8", errors="replace")  # as resolver.Root.read_text
    # The names parse_proc_modules would list: lines without the kernel's shape are skipped alike.
    names = {fields[0] for line in text.splitlines() if (fields := parse_module_line(line)) is not None}
    if MLX5 not in names or PEERMEM in names:
        return True
    return None


def _read_modules(path: str) -> bytes | None:
    try:
        fd = open_nofollow(path)
    except OSError:
        return None
    try:
        if regular_stat(fd) is None:
            return None
        data = read_up_to(fd, MODULES_LIMIT + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= MODULES_LIMIT else None
