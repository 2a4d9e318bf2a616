"""``status`` (and bug-report\'s status.json): read the host, check it, and say what DRIVER_ROOT lacks.

Read -> check, then the integrity outcome (now with ``--verify``, else init's check after Ready); the
rendering is lifecycle/status_render.py's, the printing and exit code the CLI's.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from driver_container.driverroot.integrity import VERIFY_MAX_S, check_integrity, last_integrity_check
from driver_container.driverroot.proof import prove_root_usable
from driver_container.driverroot.toolkit_features import read_absent_features
from driver_container.findings import check, has_errors
from driver_container.findings.integrity import integrity_findings
from driver_container.inspect.hoststate import inspect_host
from driver_container.lifecycle.status_render import render_text, status_json
from driver_container.runtime.deadline import Deadline
from driver_container.runtime.runner import Runner

if TYPE_CHECKING:
    from driver_container.base.paths import HostPaths
    from driver_container.driverroot.toolkit_features import ToolkitFeature
    from driver_container.findings import Finding
    from driver_container.inspect.hoststate import HostState
    from driver_container.settings import Settings


def inspect_for_status(paths: HostPaths, settings: Settings, deadline: Deadline | None = None) -> HostState:
    """The host picture, with a published root proven usable by running its static ldconfig and mapping a
    library as its consumers would (driverroot/proof.py): DRIVER_ROOT_NOT_EXECUTABLE is init's own proof."""
    state = inspect_host(paths, settings)
    if not state.root.published:
        return state
    return state._replace(root=state.root._replace(proof=prove_root_usable(paths.driver_root, Runner(), deadline)))


def collect_status(
    paths: HostPaths, settings: Settings, *, verify: bool, budget_s: float = VERIFY_MAX_S
) -> tuple[HostState, list[Finding], tuple[ToolkitFeature, ...]]:
    """What ``status`` shows (and ``bug-report`` archives as status.json): the host, its findings, and what
    the root lacks. ``verify``: hash DRIVER_ROOT now; else the outcome of init's check after Ready.

    One deadline of ``budget_s`` from the start bounds the root's proof and the hashing together: the
    hashing gets what the proof left, and says where it stopped (PUBLISHED_FILES_PARTLY_VERIFIED)."""
    deadline = Deadline(budget_s)
    state = inspect_for_status(paths, settings, deadline)
    absent = read_absent_features(paths.driver_root)  # what the toolkit would mount and the root lacks (docs/status.md)
    findings = check(state)
    if verify:
        report = check_integrity(paths.driver_root, deadline=deadline)
        findings += integrity_findings(report, paths.driver_root, when="now")
    else:
        findings += integrity_findings(last_integrity_check(paths), paths.driver_root, when="after Ready")
    return state, findings, absent


def status_report(paths: HostPaths, settings: Settings, *, verify: bool, as_json: bool) -> tuple[str, bool]:
    """The text ``status`` prints (JSON or lines) and whether a finding is an error (exit 1)."""
    state, findings, absent = collect_status(paths, settings, verify=verify)
    if as_json:
        text = json.dumps(status_json(state, findings, absent), indent=2, sort_keys=False)
    else:
        text = render_text(state, findings, absent)
    return text, has_errors(findings)
