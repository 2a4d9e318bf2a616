"""DRIVER_ROOT as a mount point: reached without following a link, checked before any mount or unmount.

RUN_DIR (/run/nvidia) is a hostPath other pods write too (the toolkit, the validator, MPS daemons), so
the names below it are not trusted: a link at RUN_DIR/driver would steer ``umount -R`` onto a mount
outside the roots, or the tmpfs over a directory outside RUN_DIR. RUN_DIR itself is configuration (its
path is resolved once, as given); every component below it, DRIVER_ROOT last, is opened
``O_DIRECTORY|O_NOFOLLOW`` from its parent's descriptor (runtime/fsutil.py ``open_dir``). A link, a file
or anything else that is not a directory there is refused, and nothing is mounted or unmounted. Where
DRIVER_ROOT is set outside RUN_DIR, its parent is the configuration and its own name is checked.

How the checked directory reaches mount(8) (driverroot/mount.py, driverroot/procsys.py):
- a mount: through the descriptor itself, as the child's working directory (``cwd`` is the descriptor's
  OWN_PROCFS_ROOT/self/fd entry, entered before exec while the child still holds it) and ``.`` as the
  target, uncanonicalized: a name swapped meanwhile is never looked up again;
- an unmount: by the canonical path checked just before (``verified_root``), with no descriptor held: an
  open descriptor in the mount keeps it busy, and ``umount`` then fails EBUSY (util-linux 2.38, seen).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from driver_container.base.errors import PublishError
from driver_container.runtime.fsutil import open_dir

FIX = "remove it on the host (init makes DRIVER_ROOT a directory of its own), or set DRIVER_ROOT to a directory"


def base_and_rel(driver_root: Path, run_dir: Path) -> tuple[Path, PurePosixPath]:
    """(configuration, what is below it): (RUN_DIR, driver) by default; (parent, name) for a DRIVER_ROOT
    set outside RUN_DIR."""
    root = driver_root
    try:
        rel = PurePosixPath(root.relative_to(run_dir))
    except ValueError:
        rel = PurePosixPath()
    if not rel.parts or ".." in rel.parts:
        return root.parent, PurePosixPath(root.name)
    return run_dir, rel


def root_path(driver_root: Path, run_dir: Path) -> str:
    """DRIVER_ROOT as the mount table names it: its configuration part resolved, the rest as given (never
    resolved: a link there is refused by ``open_root``, not followed)."""
    base, rel = base_and_rel(driver_root, run_dir)
    return os.path.join(os.path.realpath(base), *rel.parts)


def open_root(driver_root: Path, run_dir: Path, below: str = "", *, create: bool = False) -> int:
    """A descriptor of the real directory DRIVER_ROOT (or ``below`` in it), no link followed below the
    configuration; ``create`` makes what is missing. PublishError for a link, a file, anything else."""
    base, rel = base_and_rel(driver_root, run_dir)
    try:
        return open_dir(base, rel / below if below else rel, create=create)
    except PublishError as exc:
        raise PublishError(
            f"DRIVER_ROOT {driver_root}: {exc.message}: nothing is mounted or unmounted through it",
            path=exc.path or driver_root,
            fix=FIX,
        ) from exc


def verified_root(driver_root: Path, run_dir: Path) -> str:
    """``root_path`` once DRIVER_ROOT was opened as a real directory now: call it right before a command
    that takes the path (its descriptor is closed again, see the module doc)."""
    os.close(open_root(driver_root, run_dir))
    return root_path(driver_root, run_dir)


def is_real_root(driver_root: Path, run_dir: Path) -> bool:
    """DRIVER_ROOT exists as a real directory (no link below the configuration)."""
    try:
        os.close(open_root(driver_root, run_dir))
    except PublishError:
        return False
    return True
