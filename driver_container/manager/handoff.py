"""The module-file verdict and the pod context driver-manager hands to ``init`` in RUN_DIR: written or
withdrawn here, read and checked by inspect/verdict.py and inspect/podcontext.py (their formats and
bindings); and the mark of the last pod this node's manager evicted (manager/heal.py: at most one eviction per pod)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

from driver_container.base.errors import DriverContainerError
from driver_container.base.resolver import Root
from driver_container.inspect.podcontext import CONTEXT_FILE, PodContext, render_context
from driver_container.inspect.verdict import VERDICT_FILE, Verdict, render_verdict
from driver_container.runtime.fsutil import atomic_write_text
from driver_container.runtime.statusfiles import make_room

log = logging.getLogger(__name__)

EVICTION_MARK: Final = "nvidia-driver.evicted-pod"  # the uid of the pod evicted last


def write_verdict(run_dir: Path, verdict: Verdict) -> None:
    """Replace RUN_DIR's verdict atomically (whatever stood at its name is removed, never followed)."""
    target = run_dir / VERDICT_FILE
    make_room(run_dir, VERDICT_FILE)
    atomic_write_text(target, render_verdict(verdict), root=run_dir)
    log.info("module-file verdict for init written to %s (%d file(s))", target, len(verdict.module_files))


def _remove(run_dir: Path, name: str) -> None:
    make_room(run_dir, name)  # a directory or link in its place: removed, not followed
    try:
        (run_dir / name).unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("%s: cannot remove: %s", run_dir / name, exc.strerror)


def remove_verdict(run_dir: Path) -> None:
    """Drop an earlier verdict the writer can no longer stand behind (no host root this time)."""
    _remove(run_dir, VERDICT_FILE)


def write_pod_context(run_dir: Path, context: PodContext) -> None:
    """Replace RUN_DIR's pod context atomically."""
    make_room(run_dir, CONTEXT_FILE)
    atomic_write_text(run_dir / CONTEXT_FILE, render_context(context), root=run_dir)


def remove_pod_context(run_dir: Path) -> None:
    """Drop an earlier pod context: this start learned nothing of its pod."""
    _remove(run_dir, CONTEXT_FILE)


def mark_eviction(run_dir: Path, uid: str) -> None:
    """Record that the pod ``uid`` is being evicted (written before the eviction is asked for)."""
    make_room(run_dir, EVICTION_MARK)
    atomic_write_text(run_dir / EVICTION_MARK, uid + "\n", root=run_dir)


def evicted_uid(run_dir: Path) -> str | None:
    """The uid of the pod evicted last on this node, or None (bounded regular-file read through Root)."""
    try:
        text = Root(run_dir).read_text_or_none(EVICTION_MARK, limit=256)
    except DriverContainerError as exc:
        log.warning("%s: unreadable, taken as no eviction: %s", run_dir / EVICTION_MARK, exc.message)
        return None
    return (text.strip() or None) if text is not None else None
