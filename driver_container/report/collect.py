"""``bug-report``'s order of steps, each given the time the run has left and its own byte cap.

The steps that may take long on a broken node (``status``'s host inspection, hashing DRIVER_ROOT
against its manifest, reading module files) run in a forked child killed at the deadline
(runtime/timedchild.py); nvidia-bug-report.sh runs as a process group killed at it; the kernel log
reader checks it between records; the rest are bounded single reads. A step that fails or runs out of
time leaves a member that says so: a report of a broken node must still be written. Each process group
started is registered with the CLI's ``SignalCleanup``: a SIGTERM or SIGINT ends every one of them (and
removes the script's directory) before ``bug-report`` ends.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from driver_container.base.paths import HostPaths
from driver_container.driverroot.integrity import check_integrity, report_json
from driver_container.lifecycle.status import status_report
from driver_container.report import bugscript, hostfacts
from driver_container.report.archive import build_archive
from driver_container.report.environment import environment_member
from driver_container.report.kernel_log import read_kernel_log
from driver_container.report.model import DEFAULT_DEADLINE_S, DEFAULT_TOTAL_CAP, Budget, Member, missing
from driver_container.report.modfacts import modinfo_text
from driver_container.runtime.logfile import LOG_CAP
from driver_container.runtime.signalcleanup import SignalCleanup
from driver_container.runtime.timedchild import ERROR, OK, TIMED_OUT, run_until
from driver_container.settings import Settings

log = logging.getLogger(__name__)

MEMBER_CAP = 1 << 20  # one copied file or document
BIG_MEMBER_CAP = 4 << 20  # the manifest, the module files' modinfo, nvidia-bug-report.sh's log
KMSG_CAP = 1 << 20
BUG_SCRIPT_RESERVE_S = 2.0  # of the time left when nvidia-bug-report.sh starts: kept to write the archive


@dataclass(frozen=True, slots=True)
class ReportOptions:
    total_cap: int = DEFAULT_TOTAL_CAP
    deadline_s: float = DEFAULT_DEADLINE_S
    run_bug_script: bool = True


def status_document(paths: HostPaths, settings: Settings) -> str:
    """Exactly what ``status --json`` prints (cli/status_cmd.py prints the same ``status_report``)."""
    text, _failed = status_report(paths, settings, verify=False, as_json=True)
    return text + "\n"


def collect_report(
    paths: HostPaths,
    options: ReportOptions,
    status_json: Callable[[], str],
    env: Mapping[str, str] | None,
    cleanup: SignalCleanup | None = None,
) -> bytes:
    """The archive's bytes. ``status_json``: what ``status --json`` prints (``status_document``), run in a child.
    ``cleanup``: where each process group started and the script's directory are registered, so that a
    termination signal ends and removes them (the CLI's). ``env``: None for this process's."""
    started = time.time()
    budget = Budget(options.total_cap, options.deadline_s)
    members: list[Member] = []

    def add(member: Member, cap: int = MEMBER_CAP, *, keep_end: bool = False) -> None:
        members.append(budget.admit(member, cap, keep_end=keep_end))
        if member.note:
            log.debug("%s: %s", member.name, member.note)

    add(_timed("status.json", "nvidia-driver status --json", lambda: status_json().encode(), budget, cleanup))
    add(hostfacts.manifest_member(paths.driver_root), BIG_MEMBER_CAP)
    add(
        _timed(
            "verification.json",
            f"a fresh check of {paths.driver_root} against its manifest",
            lambda: _verification(paths.driver_root),
            budget,
            cleanup,
        )
    )
    for member in hostfacts.run_dir_members(paths.run):
        add(member)
    for member in hostfacts.log_members(paths.run):
        add(member, LOG_CAP, keep_end=True)
    for member in hostfacts.platform_members(paths):
        add(member)
    for member in hostfacts.module_members(paths):
        add(member)
    add(
        _timed(
            "modules/modinfo.txt",
            f"modinfo of the module files under {paths.host_root}",
            lambda: modinfo_text(paths),
            budget,
            cleanup,
        ),
        BIG_MEMBER_CAP,
    )
    add(read_kernel_log(paths.kmsg_path, budget.end), KMSG_CAP, keep_end=True)
    add(environment_member(env))
    if options.run_bug_script:
        left = budget.time_left() - BUG_SCRIPT_RESERVE_S
        for member in bugscript.run_bug_report(paths, left, BIG_MEMBER_CAP, cleanup=cleanup):
            add(member, BIG_MEMBER_CAP)
    else:
        add(missing(bugscript.MEMBER, bugscript.SCRIPT, "skipped: --no-nvidia-bug-report"))
    return build_archive(members, budget, started)


def _verification(driver_root: Path) -> bytes:
    report = check_integrity(driver_root)
    body = report_json(report) | {"ok": report.ok, "published": bool(report.manifest_sha256)}
    return (json.dumps(body, indent=2) + "\n").encode()


def _timed(
    name: str, source: str, produce: Callable[[], bytes], budget: Budget, cleanup: SignalCleanup | None
) -> Member:
    """``produce()`` in a child with the time left; its bytes, or a member saying why there are none."""
    if budget.expired:
        return missing(name, source, "skipped: the report's deadline had passed")
    left = budget.time_left()
    kind, value = run_until(produce, left, cleanup)
    if kind == OK and isinstance(value, bytes):
        return Member(name, source, value)
    if kind == TIMED_OUT:
        return missing(name, source, f"timed out after {left:.1f} s (the report's deadline); killed")
    if kind == ERROR:
        return missing(name, source, f"failed: {getattr(value, 'message', value)}")
    return missing(name, source, "failed: the collecting process ended without a result")
