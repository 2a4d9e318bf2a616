"""The files gpu-operator reads under RUN_DIR (contract: the operator's startup probe and driver manager).

- ``validations/.driver-daemons-status``: the startup probe fails unless it is absent or exactly ``Ready``
  (assets/state-driver/0400_configmap.yaml), so it reads ``NotReady`` from our start until the daemons run.
- ``nvidia-driver.state``: ``DRIVER_CONFIG_DIGEST``; k8s-driver-manager skips its uninstall when it matches.
- ``nvidia-driver.publish-failed`` (ours): the version and error of the last publish that failed and
  was rolled back; removed by the next publish that succeeds. ``status`` reports it.
- ``nvidia-driver.verify.json`` (ours, ``HostPaths.integrity_file``): the outcome of the check of
  DRIVER_ROOT against its manifest that ``init`` runs once after Ready (driverroot/integrity.py), bound to
  that manifest's digest. ``status`` reports a mismatch.
All written atomically through fsutil (readers see the old or the new content). RUN_DIR is a host
directory other pods may write: a directory, link or special file found where one of these files (or
``validations``) belongs is removed before the write (``make_room``), never followed, so it cannot fail
every start; a record that does not parse is ignored by its reader and rewritten by the next write.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
from pathlib import Path, PurePosixPath

from driver_container.base.errors import DriverContainerError, HostReadError
from driver_container.base.paths import HostPaths
from driver_container.base.resolver import Root
from driver_container.formats.boundedjson import decode_object
from driver_container.runtime.fsutil import DIR_FLAGS, atomic_write_text, check_relative, lstat_at, remove_tree_at

log = logging.getLogger(__name__)

DAEMONS_STATUS = ".driver-daemons-status"


def make_room(run_dir: Path, rel: str | PurePosixPath) -> None:
    """Before writing ``run_dir/rel``: whatever is in its place and is not a regular file (and, on the way,
    not a directory) is removed with a warning: a link is unlinked, never followed; a directory tree is
    removed through descriptors. A failure here is logged; the write that follows reports its own."""
    parts = check_relative(rel).parts
    try:
        fd = os.open(run_dir, DIR_FLAGS)
    except OSError:
        return  # no RUN_DIR yet: the write creates it
    try:
        for depth, name in enumerate(parts, start=1):
            leaf = depth == len(parts)
            st = lstat_at(fd, name)
            if st is None:
                return
            if not (stat.S_ISREG(st.st_mode) if leaf else stat.S_ISDIR(st.st_mode)):
                _remove_misplaced(fd, name, run_dir.joinpath(*parts[:depth]), st)
                return
            if not leaf:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
    except OSError as exc:
        log.warning("%s: cannot check what is in its place: %s", run_dir.joinpath(*parts), exc.strerror)
    finally:
        os.close(fd)


def _remove_misplaced(dir_fd: int, name: str, shown: Path, st: os.stat_result) -> None:
    kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a symlink" if stat.S_ISLNK(st.st_mode) else "not a file"
    log.warning("%s: %s where our state file belongs; removing it (not following it)", shown, kind)
    try:
        remove_tree_at(dir_fd, name)
    except OSError as exc:
        log.warning("%s: cannot remove: %s", shown, exc.strerror)


READY = "Ready"
NOT_READY = "NotReady"


def write_daemons_status(paths: HostPaths, ready: bool) -> None:
    # No trailing newline: the probe compares `cat` output with "Ready" (shell strips it anyway).
    value = READY if ready else NOT_READY
    make_room(paths.run_dir, f"validations/{DAEMONS_STATUS}")
    atomic_write_text(paths.validations_dir / DAEMONS_STATUS, value, root=paths.run_dir)
    log.info("%s = %s", paths.validations_dir / DAEMONS_STATUS, value)


def read_daemons_status(run: Root) -> str | None:
    text = run.read_text_or_none(f"validations/{DAEMONS_STATUS}", limit=64)
    return None if text is None else text.strip()


def write_state(paths: HostPaths, digest: str | None) -> None:
    """Record DRIVER_CONFIG_DIGEST when the operator set one (issue: "= DRIVER_CONFIG_DIGEST (when set)")."""
    if not digest:
        log.info("DRIVER_CONFIG_DIGEST not set: %s not written", paths.state_file)
        return
    make_room(paths.run_dir, paths.state_file.name)
    atomic_write_text(paths.state_file, digest, root=paths.run_dir)
    log.info("%s = %s", paths.state_file, digest)


def read_state(paths: HostPaths) -> str | None:
    """The recorded digest; None when there is none or it is unreadable (a directory, a FIFO, too large:
    as if absent, so the generic host reloads and step 10 replaces it instead of failing every start)."""
    try:
        text = paths.run.read_text_or_none(paths.state_file.name, limit=4096)
    except HostReadError as exc:
        log.warning("%s: ignored, %s", paths.state_file, exc.message)
        return None
    return None if text is None else text.strip()


MAX_FAILURE_RECORD = 16384  # the error is cut at 4000 characters
PUBLISH_FAILED = "nvidia-driver.publish-failed"  # in RUN_DIR, beside DRIVER_ROOT: a rolled-back root stays as it was


def write_publish_failure(run_dir: Path, version: str, message: str) -> None:
    """Record that the last publish (of ``version``) failed: ``status`` reports it until one succeeds."""
    text = json.dumps({"version": version, "error": message[:4000]}) + "\n"
    make_room(run_dir, PUBLISH_FAILED)
    try:
        atomic_write_text(run_dir / PUBLISH_FAILED, text, root=run_dir)
    except DriverContainerError as exc:  # the publish error matters more than its record
        log.warning("cannot record the failed publish: %s", exc.message)


def clear_publish_failure(run_dir: Path) -> None:
    """Remove the record (or whatever sits in its place: removed, never followed)."""
    make_room(run_dir, PUBLISH_FAILED)
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        os.unlink(run_dir / PUBLISH_FAILED)


def read_publish_failure(run_dir: Path) -> tuple[str, str] | None:
    """(version, error) of the last failed publish; None when the last one succeeded (or none was made).
    A record that does not parse still means a failure, of an unknown version."""
    try:
        text = Root(run_dir).read_text_or_none(PUBLISH_FAILED, limit=MAX_FAILURE_RECORD)
    except HostReadError as exc:  # too large, a directory, a FIFO: replaced by the next start (make_room)
        log.warning("%s: ignored, %s", run_dir / PUBLISH_FAILED, exc.message)
        return ("unknown", "unreadable record")
    if text is None:
        return None
    try:
        body = decode_object(text, limit=MAX_FAILURE_RECORD)
        return (str(body["version"]), str(body["error"]))
    except (ValueError, TypeError, KeyError) as exc:  # the next start that publishes (or keeps) the root clears it
        log.warning(
            "%s: ignored, not a record this version wrote (%s)",
            run_dir / PUBLISH_FAILED,
            str(exc)[:200] or type(exc).__name__,
        )
        return ("unknown", "damaged record")


MAX_VERIFY_RECORD = 64 << 10  # at most 50 listed paths with their reasons


def write_integrity_record(paths: HostPaths, text: str) -> None:
    make_room(paths.run_dir, paths.integrity_file.name)
    atomic_write_text(paths.integrity_file, text, root=paths.run_dir)


def read_integrity_record(paths: HostPaths) -> str | None:
    """The record's text; None when there is none (bounded, regular file, inside RUN_DIR)."""
    return paths.run.read_text_or_none(paths.integrity_file.name, limit=MAX_VERIFY_RECORD)
