"""An unchanged restart recognised without the publisher: ``init`` restarts in seconds, every day, on every
GPU node (a pod restart, a node reboot with the operator's pod kept), and nearly always finds DRIVER_ROOT
exactly as it left it.

The full path (``publisher``) scans the image, plans, and compares the plan with the manifest: ~60 ms of
imports (copier, planner, ELF reader) and ~35 ms of work on the Debian 535 userspace, to write nothing
(bench/startup.py). Here the same answer comes from what the manifest recorded: when
- the plan's inputs are the ones recorded (``publish_inputs``: the image's digest index, which lists every
  file a scan reads, so its size and mtime change with any of them; the code that plans; the version,
  USERSPACE_ROOT and PATH, where ldconfig is found), and
- every recorded path is on disk as recorded (type, mode, size, mtime, link target; each directory
  reached through ``O_NOFOLLOW`` descriptors, nothing followed), every source still has the recorded size
  and mtime, and ld.so.cache is the one the commit put there, and
- no commit was interrupted (journal) and no staging was left,
nothing is read or written and ``init`` goes on. Anything else (no index: a userspace that is not the
image's; an older manifest without inputs) takes the full path, which also repairs what differs.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path, PurePosixPath

from driver_container.base.errors import DriverContainerError
from driver_container.base.paths import HostPaths
from driver_container.base.resolver import Root
from driver_container.driverroot.journal import STAGING, interrupted
from driver_container.driverroot.manifest import Manifest, Record, read_manifest
from driver_container.formats.ldcache import LD_SO_CACHE
from driver_container.formats.userspace_layout import DIGEST_INDEX
from driver_container.runtime import statusfiles
from driver_container.runtime.dirtree import Tree
from driver_container.runtime.runner import children_search_path

log = logging.getLogger(__name__)

# The code that decides a plan (the publisher and the formats it reads): any change to it (a new image)
# re-plans. Its files' sizes and mtimes are read, not their contents: ~40 stats.
PLANNING_CODE = ("publish", "formats")
PACKAGE = Path(__file__).resolve().parent.parent


def publish_inputs(userspace: Root, version: str) -> str | None:
    """What a plan is computed from, as one string (recorded in the manifest); None without the image's
    digest index, whose absence means that the userspace's files cannot be vouched for by one stat."""
    index = _identity(userspace.path / DIGEST_INDEX)
    if index is None:
        return None
    code = [(f"{d}/{e.name}", _identity(Path(e.path))) for d in PLANNING_CODE for e in _modules(PACKAGE / d)]
    resolved = os.path.realpath(userspace.path)
    return json.dumps([version, resolved, index, code, children_search_path()], separators=(",", ":"))


def _modules(directory: Path) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as entries:
        return sorted((e for e in entries if e.name.endswith(".py")), key=lambda e: e.name)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def keep_unchanged_root(paths: HostPaths, version: str, root_changed: bool | None) -> Manifest | None:
    """The live manifest when DRIVER_ROOT is exactly what it records for the same inputs: nothing is
    written (a publish failure recorded earlier is cleared, as a publish would). ``root_changed``: this
    publish's mount decision, made before (publish/rootdir.py ``prepare_existing_root``), as in the
    publisher: NVIDIA's leftover bind mount unmounted now shows another root; None: no real directory."""
    if root_changed is not False:  # a link: the full path refuses it; a new mount: the full path fills it
        return None
    manifest = unchanged_manifest(paths.driver_root, paths.userspace, version)
    if manifest is None:
        return None
    statusfiles.clear_publish_failure(paths.run_dir)
    log.info(
        "driver root %s unchanged since its last publish of %s (%d paths checked): nothing written",
        paths.driver_root,
        version,
        len(manifest.records),
    )
    return manifest


def unchanged_manifest(root: Path, userspace: Root, version: str) -> Manifest | None:
    """The live manifest when DRIVER_ROOT (``root``) is what it records and the inputs (USERSPACE_ROOT's)
    are the same; else None."""
    inputs = publish_inputs(userspace, version)
    if inputs is None or interrupted(root) or os.path.lexists(root / STAGING):
        return None
    _text, manifest = read_manifest(root)
    if manifest is None or manifest.version != version or manifest.inputs != inputs or manifest.cache is None:
        return None
    tree = Tree(root)
    try:
        cache = tree.lstat(PurePosixPath(LD_SO_CACHE))
        if cache is None or not stat.S_ISREG(cache.st_mode) or (cache.st_size, cache.st_mtime_ns) != manifest.cache:
            return None
        if not all(_on_disk(tree, rec) for rec in manifest.records):
            return None
    except (OSError, DriverContainerError) as exc:
        log.debug("not recognised as unchanged (the full publish decides): %s", exc)
        return None
    finally:
        tree.close()
    if not all(
        _identity(Path(rec.source)) == (rec.source_size, rec.source_mtime_ns) for rec in manifest.records if rec.source
    ):
        return None
    return manifest


def _on_disk(tree: Tree, rec: Record) -> bool:
    st = tree.lstat(PurePosixPath(rec.path))
    if st is None or (rec.type == "file" and stat.S_IMODE(st.st_mode) != rec.mode):
        return False
    if rec.type == "dir":
        return stat.S_ISDIR(st.st_mode)
    if rec.type == "link":
        return stat.S_ISLNK(st.st_mode) and tree.readlink(PurePosixPath(rec.path)) == rec.target
    return stat.S_ISREG(st.st_mode) and (st.st_size, st.st_mtime_ns) == (rec.size, rec.mtime_ns)
