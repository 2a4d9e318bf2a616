"""DRIVER_ROOT itself: create it, and clear a bind mount NVIDIA's driver container left on it.

NVIDIA's script exposes its container root with ``mount --rbind`` at /run/nvidia/driver; after that pod
is gone the mount can remain (a reported gpu-operator pain point) and would hide what we publish.
The directory is kept, never replaced: operands bind-mount it, and replacing it would detach them.
"""

from __future__ import annotations

import logging
from pathlib import Path

from driver_container.errors import CommandError, PublishError
from driver_container.kernel.mountinfo import parse_mount_points
from driver_container.paths import HostPaths
from driver_container.runner import Runner

log = logging.getLogger(__name__)

def create_driver_root(driver_root: Path) -> None:
    for parent in [driver_root, *driver_root.parents]:
        if parent.exists() and not parent.is_dir():
            raise PublishError(
                f"DRIVER_ROOT {driver_root}: {parent} is a {'link' if parent.is_symlink() else 'regular file'}, "
                "not a directory",
                fix=f"remove {parent} or set DRIVER_ROOT to a directory path",
            )
    try:
        driver_root.mkdir(parents=True, exist_ok=True, mode=0o755)
    except OSError as exc:
        raise PublishError(f"DRIVER_ROOT {driver_root}: cannot create: {exc.strerror}") from exc


def unmount_leftover(paths: HostPaths, runner: Runner) -> int:
    """Unmount every mount stacked on DRIVER_ROOT; returns how many were removed."""
    text = paths.proc.read_text_or_none("self/mountinfo", limit=16 << 20)
    if text is None:
        log.debug("no self/mountinfo under %s; assuming DRIVER_ROOT is not a mount point", paths.proc.path)
        return 0
    target = str(paths.driver_root.resolve())
    count = parse_mount_points(text).count(target)
    for _ in range(count):
        log.warning("DRIVER_ROOT %s is a mount point (left by a previous driver container); unmounting", target)
        try:
            runner.run(["umount", target])
        except CommandError as exc:
            raise PublishError(
                f"DRIVER_ROOT {target} is still a mount point (found in {paths.proc.path}/self/mountinfo) "
                f"and unmounting it failed: {exc.message}",
                fix=f"unmount it on the host (umount -R {paths.host_driver_root}) or reboot the node, then restart",
            ) from exc
    return count
