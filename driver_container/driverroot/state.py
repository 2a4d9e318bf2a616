"""DRIVER_ROOT as ``status`` (and ``init``'s verdict) sees it, in one record read by one function.

Where it is, what its manifest says was published, how the last publish ended, the mount holding it and
the pseudo-filesystems in it (procsys.py), its statvfs flags (mount.py) and, for ``status`` only, the
proof that its consumers can use it (proof.py, added by lifecycle/status.py). ``HostState`` holds this
record whole (inspect/hoststate.py); findings and the status document read it from there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver_container.base.problems import Problem, noted
from driver_container.base.records import NamedRecord
from driver_container.driverroot.journal import interrupted
from driver_container.driverroot.manifest import read_manifest
from driver_container.driverroot.mount import RootFlags, read_root_flags
from driver_container.driverroot.procsys import ProcSys, read_root_mounts
from driver_container.runtime.statusfiles import read_publish_failure

if TYPE_CHECKING:
    from pathlib import Path

    from driver_container.base.resolver import Root
    from driver_container.driverroot.proof import RootProof
    from driver_container.formats.kernel.mountinfo import Mount


class RootState(NamedRecord):
    """DRIVER_ROOT: its manifest (read bounded, no link followed), the last failed publish, an interrupted
    one (journal left), and its mounts and flags (None: unknown, the reason is in ``problems``)."""

    path: Path
    version: str | None  # the manifest's (None: nothing published)
    failure: tuple[str, str] | None = None  # (version, error) of the last publish, when it failed
    interrupted: bool = False  # a journal is left: the next start rolls that publish back
    mount: Mount | None = None  # the mount holding DRIVER_ROOT in our own mountinfo
    proc_sys: ProcSys | None = None  # the root's shell, and the mounts at its proc and sys
    flags: RootFlags | None = None  # statvfs at DRIVER_ROOT
    proof: RootProof | None = None  # status only (driverroot/proof.py)
    problems: tuple[Problem, ...] = ()  # the mount table or statvfs unreadable (also in HostState.problems)

    @property
    def published(self) -> bool:
        return self.version is not None


def read_root_state(driver_root: Path, run_dir: Path, own_proc: Root) -> RootState:
    """DRIVER_ROOT's record (no proof: ``status`` adds it): its manifest and RUN_DIR's failure record, then
    this process's own mountinfo (``own_proc``), read once, and statvfs at the root."""
    _text, manifest = read_manifest(driver_root)
    failure, journal_left = read_publish_failure(run_dir), interrupted(driver_root)
    problems: list[Problem] = []
    mounts = noted(problems, lambda: read_root_mounts(driver_root, run_dir, own_proc), None)
    flags = noted(problems, lambda: read_root_flags(driver_root), None)
    return RootState(
        path=driver_root,
        version=manifest.version if manifest else None,
        failure=failure,
        interrupted=journal_left,
        mount=mounts.holder if mounts else None,
        proc_sys=mounts.proc_sys if mounts else None,
        flags=flags,
        problems=tuple(problems),
    )
