"""Commit a publish into the live DRIVER_ROOT so that any failure, or a SIGKILL, can be undone exactly.

Nothing of the live root changes before ``Transaction.begin`` has written (fsync'd, temp + rename) the
journal DRIVER_ROOT/.driver-container/journal.json listing every step of the commit, in order:

- ``mkdir``: create a directory (a file or link in the way is moved aside first);
- ``put``: rename a temporary of DRIVER_ROOT/.driver-container/staging over a path;
- ``remove``: move a path the plan no longer has aside.

Whatever a step replaces is kept in DRIVER_ROOT/.driver-container/rollback/<step> on the same filesystem:
a file or link by a hard link made before the rename (so the live path is never missing: a consumer
sees the old or the new entry), a directory by rename. Undoing a step (``_undo``) only looks at what is
on disk, so it is correct whether the step ran, ran halfway (killed between its two renames) or never
ran; ``rollback`` undoes every step in reverse order. The journal is removed once the last step (the
manifest) is in place: that unlink is the commit point. ``recover`` (first thing of the next publish,
and of ``init`` after it killed its publishing child) rolls back an interrupted commit and removes a
rollback area left after the commit point.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Literal, get_args

from driver_container.base.errors import PublishError
from driver_container.base.records import NamedRecord
from driver_container.formats.boundedjson import decode_json
from driver_container.runtime.fsutil import (
    atomic_write_text,
    check_relative,
    open_dir,
    open_regular,
    opened_dir,
    remove_tree_at,
)

log = logging.getLogger(__name__)

STATE_DIR = PurePosixPath(".driver-container")
JOURNAL = STATE_DIR / "journal.json"
ROLLBACK = STATE_DIR / "rollback"
STAGING = STATE_DIR / "staging"
FORMAT = 1
MAX_JOURNAL = 16 << 20  # ~100 bytes a step; a publish has ~50 steps


JournalAction = Literal["mkdir", "put", "remove"]  # what one step of a commit does at its path


class Step(NamedRecord):
    action: JournalAction
    path: str  # relative to DRIVER_ROOT
    existed: bool  # something was at ``path`` before the step (kept aside while the commit runs)
    source: str = ""  # "put": the temporary's name in STAGING


def _backup(index: int) -> str:
    return str(index)


class Transaction:
    """The steps of one commit; ``run`` them in order, then ``finish`` (or ``rollback`` on failure)."""

    def __init__(self, root: Path, steps: list[Step]) -> None:
        for step in steps:
            check_relative(step.path)
        self.root = root
        self.steps = steps
        self._next = 0

    def begin(self) -> None:
        with opened_dir(self.root, STATE_DIR, create=True) as state:
            with contextlib.suppress(FileNotFoundError):
                remove_tree_at(state, ROLLBACK.name)  # left after an earlier commit point
            os.mkdir(ROLLBACK.name, 0o700, dir_fd=state)
        body = {"format": FORMAT, "steps": [[s.action, s.path, s.existed, s.source] for s in self.steps]}
        atomic_write_text(self.root / JOURNAL, json.dumps(body) + "\n", mode=0o600, root=self.root)

    def run_next(self, action: JournalAction | None = None) -> Step:
        """Run the next step (checked to be ``action`` when given)."""
        step = self.steps[self._next]
        if action is not None and step.action != action:
            raise PublishError(
                f"internal: commit step {step.action} {step.path} where {action} was expected", path=step.path
            )
        _do(self.root, step, _backup(self._next))
        self._next += 1
        return step

    def run_until(self, stop: int) -> None:
        while self._next < stop:
            self.run_next()

    def finish(self) -> None:
        """The commit point: remove the journal, then what the steps kept aside."""
        with opened_dir(self.root, STATE_DIR) as state:
            os.unlink(JOURNAL.name, dir_fd=state)
            os.fsync(state)
            with contextlib.suppress(FileNotFoundError):
                remove_tree_at(state, ROLLBACK.name)

    def rollback(self) -> None:
        _rollback(self.root, self.steps)


def _split(path: str) -> tuple[PurePosixPath, str]:
    rel = check_relative(path)
    return rel.parent, rel.name


def _do(root: Path, step: Step, backup: str) -> None:
    parent, name = _split(step.path)
    with opened_dir(root, parent) as pfd, opened_dir(root, ROLLBACK) as rfd:
        if step.existed:
            st = os.lstat(name, dir_fd=pfd)
            if stat.S_ISDIR(st.st_mode) or step.action == "remove":
                os.rename(name, backup, src_dir_fd=pfd, dst_dir_fd=rfd)
            else:
                os.link(name, backup, src_dir_fd=pfd, dst_dir_fd=rfd, follow_symlinks=False)
        if step.action == "mkdir":
            with contextlib.suppress(FileNotFoundError):  # a file or link in the way: kept as backup above
                os.unlink(name, dir_fd=pfd)
            os.mkdir(name, 0o755, dir_fd=pfd)
        elif step.action == "put":
            with opened_dir(root, STAGING) as sfd:
                os.rename(step.source, name, src_dir_fd=sfd, dst_dir_fd=pfd)


def _undo(root: Path, step: Step, backup: str) -> None:
    """Put back what was at ``step.path`` before the step, whether the step ran fully, partly or not."""
    parent, name = _split(step.path)
    try:
        pfd = open_dir(root, parent)
    except PublishError:
        return  # its directory is gone or was never made: nothing of this step is there
    try:
        kept = _lstat_in(root, backup)
        now = _lstat_at(pfd, name)
        if not step.existed:
            if now is not None:
                remove_tree_at(pfd, name)  # new: made by this step
            return
        if kept is None:
            return  # never started: the original is still in place
        if now is not None and (now.st_ino, now.st_dev) != (kept.st_ino, kept.st_dev):
            remove_tree_at(pfd, name)  # what the step put there (a file, link or the directory it made)
        with opened_dir(root, ROLLBACK) as rfd:
            os.rename(backup, name, src_dir_fd=rfd, dst_dir_fd=pfd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(backup, dir_fd=rfd)  # a hard link of the same inode: rename(2) left it
    finally:
        os.close(pfd)


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None


def _lstat_in(root: Path, backup: str) -> os.stat_result | None:
    try:
        with opened_dir(root, ROLLBACK) as rfd:
            return _lstat_at(rfd, backup)
    except PublishError:
        return None


def _rollback(root: Path, steps: list[Step]) -> None:
    for index in reversed(range(len(steps))):
        try:
            _undo(root, steps[index], _backup(index))
        except OSError as exc:  # keep going: every other step is still undone
            log.error("cannot undo %s %s: %s", steps[index].action, steps[index].path, exc.strerror)
    with opened_dir(root, STATE_DIR) as state:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(JOURNAL.name, dir_fd=state)
        with contextlib.suppress(FileNotFoundError):
            remove_tree_at(state, ROLLBACK.name)
    log.warning("rolled back %d step(s): %s is the previous root again", len(steps), root)


def recover(root: Path) -> bool:
    """Roll back a commit that was interrupted (journal present); True when one was. Never raises for a
    damaged journal: it is then dropped (the manifest check rewrites whatever does not match)."""
    try:
        state = open_dir(root, STATE_DIR)
    except PublishError:
        return False  # no state directory (a first publish) or something that is not one: the scan reports it
    try:
        steps = _read_steps(state, root)
        if steps is None:
            with contextlib.suppress(FileNotFoundError):
                remove_tree_at(state, ROLLBACK.name)  # kept aside by a publish killed after its commit point
            return False
    finally:
        os.close(state)
    log.warning("%s: a publish was interrupted; rolling back its %d step(s)", root / JOURNAL, len(steps))
    _rollback(root, steps)
    return True


def _read_steps(state: int, root: Path) -> list[Step] | None:
    try:
        fd, st = open_regular(JOURNAL.name, shown=str(root / JOURNAL), dir_fd=state)
    except PublishError:
        if os.path.lexists(root / JOURNAL):
            log.warning("%s: not a regular file; removing it", root / JOURNAL)
            with contextlib.suppress(OSError):
                remove_tree_at(state, JOURNAL.name)
        return None
    try:
        data = os.read(fd, MAX_JOURNAL + 1) if st.st_size <= MAX_JOURNAL else b""
    finally:
        os.close(fd)
    steps = parse_journal(data)
    if steps is None:
        log.warning("%s: damaged journal dropped; the publish rewrites what does not match", root / JOURNAL)
        with contextlib.suppress(OSError):
            os.unlink(JOURNAL.name, dir_fd=state)
    return steps


def parse_journal(data: bytes) -> list[Step] | None:
    """The steps of a journal (pure); None when it is not one this code wrote."""
    try:
        body = decode_json(data, limit=MAX_JOURNAL)
        if not isinstance(body, dict) or body.get("format") != FORMAT or not isinstance(body.get("steps"), list):
            return None
        steps = []
        for action, path, existed, source in body["steps"]:
            ok = action in get_args(JournalAction) and isinstance(existed, bool)
            if not ok or not isinstance(path, str) or not isinstance(source, str) or "/" in source:
                return None
            check_relative(path)
            steps.append(Step(action, path, existed, source))
        return steps
    except (ValueError, TypeError, PublishError):
        return None


def interrupted(root: Path) -> bool:
    """A journal is present: a publish was interrupted and the next start rolls it back (for ``status``)."""
    return os.path.lexists(root / JOURNAL)
