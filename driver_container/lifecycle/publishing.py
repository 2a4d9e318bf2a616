"""Verify and publish in a forked child, and the check of the published root after ``Ready``.

The child (``runtime.supervise.run_in_child``) keeps what verifying and publishing import and allocate
(pyelftools, the planner, the copier's buffers) out of the ``init`` that then waits for days. In it, an
unchanged root is recognised first (``publish.unchanged``: the manifest's inputs and every recorded path
checked by stat), so a restart imports the publisher only when something is to be written.
Function-local imports keep the hot path light (bench/startup.py, issue 18): the publisher, the
integrity check and the Kubernetes client are imported in the child that needs them, never in the
waiting parent.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from driver_container.errors import DriverContainerError
from driver_container.lifecycle.verify import loaded_version, verify
from driver_container.paths import HostPaths
from driver_container.runtime.runner import Runner
from driver_container.runtime.supervise import Shutdown, run_in_child
from driver_container.settings import Settings

if TYPE_CHECKING:
    from driver_container.inspect.hoststate import HostState
    from driver_container.inspect.platform import PlatformInfo

log = logging.getLogger(__name__)


def check_published_root(paths: HostPaths) -> bool:
    """In the background child: hashing stays out of the waiting parent."""
    from driver_container.publish.integrity import verify_and_record  # lazy, hot path: in the child only

    return verify_and_record(paths).ok


def publish_in_child(
    paths: HostPaths, settings: Settings, runner: Runner, shutdown: Shutdown, platform: PlatformInfo | None = None
) -> bool:
    """Verify and publish in the child; False when a signal stopped it (the child is killed after a grace)."""
    try:
        done = run_in_child(lambda: _verify_and_publish(paths, settings, runner, platform), shutdown)
    except DriverContainerError:
        if shutdown.requested:
            log.info("%s received while verifying and publishing: stopped", shutdown.describe())
            _undo_interrupted_publish(paths)
            return False
        raise
    if done is None:  # killed after the grace period, maybe mid-commit
        _undo_interrupted_publish(paths)
    return done is not None and not shutdown.requested


def _undo_interrupted_publish(paths: HostPaths) -> None:
    """The publishing child was killed by a signal: roll its commit back now (renames only), so the
    previous root is intact even if no container starts again here."""
    from driver_container.publish.journal import recover  # lazy, hot path: see the module doc

    try:
        recover(paths.driver_root)
    except (DriverContainerError, OSError) as exc:
        log.warning("the interrupted publish is rolled back at the next start: %s", exc)


def _verify_and_publish(
    paths: HostPaths, settings: Settings, runner: Runner, platform: PlatformInfo | None = None
) -> str:
    state = verify(paths, settings, platform)
    version = loaded_version(state)
    # Lazy, hot path: in the child only, and the publisher only when something is to be written.
    from driver_container.publish.unchanged import keep_unchanged_root

    if keep_unchanged_root(paths, version, runner) is None:
        from driver_container.publish.publisher import publish_driver_root

        publish_driver_root(paths, version, runner, check_unchanged=False)  # just checked; logs its summary
    _report_published(state, version)
    return version


def _report_published(state: HostState, version: str) -> None:
    """Annotate the Node from this (already heavy) child; a no-op outside a cluster, never fatal."""
    from driver_container.manager.nodereport import READY, NodeVerdict, report  # lazy, hot path: see above

    flavour = state.nvidia_version.flavour if state.nvidia_version else None
    report(NodeVerdict(READY, version, flavour, state.module_files_source))
