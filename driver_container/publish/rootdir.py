"""DRIVER_ROOT itself: create it, clear a bind mount NVIDIA's driver container left on it, give it its own
exec-capable mount where needed (driverroot/mount.py).

NVIDIA's script exposes its container root with ``mount --rbind`` at /run/nvidia/driver; after that pod
is gone the mount can remain (a reported gpu-operator pain point) and would hide what we publish. Our
own exec-capable tmpfs there (driverroot/mount.py) is not a leftover and stays.
The directory is kept, never replaced: operands bind-mount it, and replacing it would detach them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from driver_container.base.errors import CommandError, HostReadError, PublishError
from driver_container.base.paths import HostPaths
from driver_container.driverroot.mount import MOUNTINFO, describe, ensure_exec_mount, leftovers_at, read_mounts
from driver_container.driverroot.rootpath import base_and_rel, is_real_root, open_root, verified_root
from driver_container.formats.kernel.mountinfo import Mount
from driver_container.runtime.runner import Runner

log = logging.getLogger(__name__)


def create_driver_root(driver_root: Path, run_dir: Path) -> None:
    """Make DRIVER_ROOT a real directory: its configured base (RUN_DIR) as given, each name below it
    without following a link (driverroot/rootpath.py): a link or a file there is refused."""
    base, _rel = base_and_rel(driver_root, run_dir)
    for parent in [base, *base.parents]:
        if parent.exists() and not parent.is_dir():
            raise PublishError(
                f"DRIVER_ROOT {driver_root}: {parent} is a {'link' if parent.is_symlink() else 'regular file'}"
                ", not a directory",
                path=parent,
                fix=f"remove {parent} or set DRIVER_ROOT to a directory path",
            )
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o755)
    except OSError as exc:
        raise PublishError(f"DRIVER_ROOT {driver_root}: cannot create: {exc.strerror}", path=base) from exc
    os.close(open_root(driver_root, run_dir, create=True))


def prepare_driver_root(paths: HostPaths, runner: Runner) -> bool:
    """Leftover mounts off DRIVER_ROOT, then our exec-capable mount where its filesystem needs one
    (driverroot/mount.py); True when DRIVER_ROOT shows other content than before (what was read is stale).
    DRIVER_ROOT is checked to be a real directory first: nothing is done through a link or a file."""
    target = verified_root(paths.driver_root, paths.run_dir)
    unknown = ""
    try:
        mounts = read_mounts(paths.own_proc)
    except HostReadError as exc:
        mounts, unknown = None, exc.message
    if mounts is None:
        unknown = unknown or f"{paths.own_proc.path}/{MOUNTINFO} does not exist"
        log.debug("%s: no leftover mounts can be found", unknown)
        return ensure_exec_mount(paths, runner, None, unknown)
    removed = unmount_leftover(paths, runner, mounts, target)
    remaining = [m for m in mounts if m not in removed]  # their submounts are below DRIVER_ROOT: irrelevant
    return ensure_exec_mount(paths, runner, remaining) or bool(removed)


def prepare_existing_root(paths: HostPaths, runner: Runner) -> bool | None:
    """The mount decision of one publish, made once and handed to the unchanged check and the publisher
    (lifecycle/publishing.py): ``prepare_driver_root``'s answer for a DRIVER_ROOT that is a real directory
    now, None where it is not (missing: the publisher creates it, then decides; a link: it refuses it)."""
    return prepare_driver_root(paths, runner) if is_real_root(paths.driver_root, paths.run_dir) else None


def unmount_leftover(paths: HostPaths, runner: Runner, mounts: list[Mount], target: str) -> list[Mount]:
    """Unmount the mounts a previous driver container stacked on DRIVER_ROOT (``target``, its canonical
    path), top first, down to ours (kept) or to none; returns those removed. Each ``umount`` takes the path
    checked right before it (driverroot/rootpath.py: a descriptor held across it would keep it busy)."""
    leftovers = leftovers_at(mounts, target)
    for leftover in leftovers:
        log.warning(
            "DRIVER_ROOT %s is a mount point (%s, left by a previous driver container); unmounting",
            target,
            describe(leftover),
        )
        if verified_root(paths.driver_root, paths.run_dir) != target:  # the configuration resolves elsewhere now: stop
            raise PublishError(f"DRIVER_ROOT {paths.driver_root} moved while unmounting", path=target)
        try:
            # -R: NVIDIA's rbind of its container root carries that root's submounts (/proc, /dev...);
            # it unmounts the top mount at the target and its children, never the one it sits on.
            runner.run(["umount", "-R", target])
        except CommandError as exc:
            raise PublishError(
                f"DRIVER_ROOT {target} is still a mount point (found in {paths.own_proc.path}/{MOUNTINFO}) "
                f"and unmounting it failed: {exc.message}",
                path=target,
                fix=f"unmount it on the host (umount -R {paths.host_driver_root}) or reboot the node, then restart",
            ) from exc
    return leftovers
