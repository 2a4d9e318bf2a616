"""The module-file verdict driver-manager hands to ``init`` in RUN_DIR: written or withdrawn here, read and
checked by inspect/verdict.py (its format and binding)."""

from __future__ import annotations

import logging
from pathlib import Path

from driver_container.inspect.verdict import VERDICT_FILE, Verdict, render_verdict
from driver_container.runtime.fsutil import atomic_write_text
from driver_container.runtime.statusfiles import make_room

log = logging.getLogger(__name__)


def write_verdict(run_dir: Path, verdict: Verdict) -> None:
    """Replace RUN_DIR's verdict atomically (whatever stood at its name is removed, never followed)."""
    target = run_dir / VERDICT_FILE
    make_room(run_dir, VERDICT_FILE)
    atomic_write_text(target, render_verdict(verdict), root=run_dir)
    log.info("module-file verdict for init written to %s (%d file(s))", target, len(verdict.module_files))


def remove_verdict(run_dir: Path) -> None:
    """Drop an earlier verdict the writer can no longer stand behind (no host root this time)."""
    make_room(run_dir, VERDICT_FILE)  # a directory or link in its place: removed, not followed
    try:
        (run_dir / VERDICT_FILE).unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("%s: cannot remove: %s", run_dir / VERDICT_FILE, exc.strerror)
