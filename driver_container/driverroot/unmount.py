"""Unmount the published root for good: the tmpfs at DRIVER_ROOT and the mounts below it (its ``sys``,
a ``proc`` of ``mps-minimal``), on a final stop of the driver pod and by ``driver-manager uninstall``.

Without it the root's tmpfs (the whole userspace, 238 MB and more) stays in the node's memory until
reboot; NVIDIA's script unmounts its root when it stops for good (NVIDIA/gpu-driver-container
ubuntu24.04/nvidia-driver ``_shutdown``). Only mounts at or below DRIVER_ROOT are touched, read from this
process's own mountinfo; DRIVER_ROOT is opened as a real directory right before (no link below RUN_DIR,
driverroot/rootpath.py), and every mount point below it likewise, so a link planted in RUN_DIR or in the
root never steers ``umount`` elsewhere. ``umount -R`` first; where that fails (a consumer still holds a
file: EBUSY) ``umount -l -R`` detaches it now and the kernel frees it once the last user closes it.
Idempotent: with nothing mounted there it does nothing.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from driver_container.base.errors import CommandError, HostReadError, PublishError
from driver_container.base.paths import HostPaths
from driver_container.driverroot.mount import read_mounts
from driver_container.driverroot.rootpath import open_root, root_path, verified_root

if TYPE_CHECKING:
    from pathlib import Path

    from driver_container.formats.kernel.mountinfo import Mount
    from driver_container.runtime.runner import Runner

log = logging.getLogger(__name__)

UMOUNT_TIMEOUT_S = 10.0


def _at_or_below(mounts: list[Mount], target: str) -> list[str]:
    return sorted({m.mount_point for m in mounts if m.mount_point == target or m.mount_point.startswith(f"{target}/")})


def _tops(mounts: list[Mount], target: str) -> list[str]:
    """The outermost mount points at or below ``target``: ``target`` itself when it is one, else those
    below it that no other mount below it contains (``umount -R`` takes what is below each)."""
    points = _at_or_below(mounts, target)
    if target in points:
        return [target]
    return [p for p in points if not any(p.startswith(f"{other}/") for other in points if other != p)]


def _umount(runner: Runner, point: str) -> str | None:
    """None once ``point`` and what is below it are unmounted (lazily when busy), else why not."""
    failure = ""
    for argv in (["umount", "-R", point], ["umount", "-l", "-R", point]):
        try:
            done = runner.run(argv, check=False, timeout=UMOUNT_TIMEOUT_S)
        except CommandError as exc:
            return exc.message
        if done.returncode == 0:
            return None
        failure = f"{' '.join(argv)} exited {done.returncode}: {' '.join(done.stderr.split())[:200]}"
    return failure


def unmount_root(paths: HostPaths, runner: Runner) -> list[str]:
    """Unmount every mount at or below DRIVER_ROOT; the mount points unmounted. Warns (never raises) for
    what it cannot read or unmount, and refuses a DRIVER_ROOT that is a link or not a directory."""
    try:
        mounts = read_mounts(paths.own_proc)
        target = verified_root(paths.driver_root, paths.run_dir)
    except (HostReadError, PublishError) as exc:
        log.warning("DRIVER_ROOT %s not unmounted: %s", paths.driver_root, exc.message)
        return []
    if mounts is None:
        log.warning("DRIVER_ROOT %s not unmounted: %s/self/mountinfo does not exist", target, paths.own_proc.path)
        return []
    done: list[str] = []
    root = (paths.driver_root, paths.run_dir)
    for point in _tops(mounts, target):
        below = point[len(target) + 1 :]
        try:  # checked right before umount takes the path (driverroot/rootpath.py: no descriptor held)
            checked = verified_root(*root) == target and (not below or _is_dir(*root, below))
        except PublishError:
            checked = False
        if not checked:
            log.warning("%s is not a directory of DRIVER_ROOT any more (a link?): not unmounted", point)
            continue
        failure = _umount(runner, point)
        if failure is not None:
            log.warning("%s not unmounted: %s", point, failure)
            continue
        done.append(point)
    if done:
        log.info("unmounted %s: the published root's memory is freed", ", ".join(done))
    else:
        log.info("nothing mounted at or below DRIVER_ROOT %s", target)
    return done


def _is_dir(driver_root: Path, run_dir: Path, below: str) -> bool:
    """``below`` is a real directory of DRIVER_ROOT (PublishError for a link or a file)."""
    os.close(open_root(driver_root, run_dir, below))
    return True


def mounted_at_or_below(paths: HostPaths) -> list[str]:
    """The mount points at or below DRIVER_ROOT now (this process's mountinfo; empty where it is absent)."""
    mounts = read_mounts(paths.own_proc)
    return _at_or_below(mounts, root_path(paths.driver_root, paths.run_dir)) if mounts else []
