"""Verify, publish in a forked child when something is to be written, and what follows ``Ready``.

Verifying and the unchanged check run in ``init`` itself: on an unchanged restart (nearly every start)
nothing is written, and a child forked only to read the host would add a second process (its start,
its exit, ctypes for PR_SET_PDEATHSIG, the loaded modules read a second time) to every restart
(bench/README.md, "unchanged restart to Ready"). What they import stays in the waiting process: the
module-file reader (no pyelftools) and the manifest's reader, ~40 KB of its RSS.
Their reads are bounded and ``O_NONBLOCK`` (runtime/fsutil.py), so a hostile file cannot hold up a
SIGTERM; only a hung filesystem could, as it would hold any process reading it.

Publishing (``run_in_child``) keeps what it imports and allocates (the planner, the copier's buffers,
hashing without an index) out of the ``init`` that then waits for days, and a child stuck on a slow copy
is killed after a grace. The Node's annotations and the check of the published root come after ``Ready``,
in the background child (``after_ready``): neither is on the node's critical path.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from driver_container.base.errors import DriverContainerError, PublishError
from driver_container.base.paths import HostPaths
from driver_container.base.records import NamedRecord
from driver_container.driverroot.journal import recover
from driver_container.driverroot.mount import UNUSABLE_ROOT_FIX
from driver_container.driverroot.proof import PROOF_BINARY, prove_root_usable
from driver_container.findings import check
from driver_container.lifecycle.hostcheck import check_host, loaded_version
from driver_container.runtime.runner import Runner
from driver_container.runtime.supervise import Shutdown, lowest_priority, run_in_child
from driver_container.settings import Cluster, Settings

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from driver_container.inspect.hoststate import HostState, LoadedModules
    from driver_container.inspect.platform import PlatformInfo

log = logging.getLogger(__name__)


class Published(NamedRecord):
    """What ``init`` verified and published: the Node's verdict is made of it after ``Ready``."""

    state: HostState
    version: str


def check_and_publish(
    paths: HostPaths,
    settings: Settings,
    runner: Runner,
    shutdown: Shutdown,
    platform: PlatformInfo | None = None,
    loaded: LoadedModules | None = None,
) -> Published | None:
    """Verify here, then publish in a child unless DRIVER_ROOT is unchanged; None when a signal stopped it
    (a publishing child is killed after a grace, its half-done commit rolled back). ``platform`` and
    ``loaded``: what ``init`` already read (detection, the module wait's last poll), not read again."""
    state = check_host(paths, settings, platform, loaded)
    version = loaded_version(state)
    # lazy, hot path: not for `status`
    from driver_container.publish.rootdir import prepare_existing_root
    from driver_container.publish.unchanged import keep_unchanged_root

    # The mount decision, once for this publish: the unchanged check and the publishing child both get it.
    changed = prepare_existing_root(paths, runner)
    if keep_unchanged_root(paths, version, changed) is not None:
        return Published(state, version)
    if shutdown.requested:
        log.info("%s received: not publishing", shutdown.describe())
        return None
    try:
        done = run_in_child(lambda: _publish(paths, version, runner, changed is not None), shutdown)
    except DriverContainerError:
        if shutdown.requested:
            log.info("%s received while publishing: stopped", shutdown.describe())
            _undo_interrupted_publish(paths.driver_root)
            return None
        raise
    if done is None:  # killed after the grace period, maybe mid-commit
        _undo_interrupted_publish(paths.driver_root)
    return Published(state, version) if done is not None and not shutdown.requested else None


def _publish(paths: HostPaths, version: str, runner: Runner, root_prepared: bool) -> str:
    """In the child: the publisher is imported only when something is to be written; ``root_prepared``: the
    mount decision was made in ``init`` (``check_and_publish``), not made again here."""
    from driver_container.publish.publisher import publish_driver_root  # lazy, hot path: see the module doc

    publish_driver_root(paths, version, runner, check_unchanged=False, root_prepared=root_prepared)  # just checked
    return version


def _undo_interrupted_publish(driver_root: Path) -> None:
    """The publishing child was killed by a signal: roll its commit back now (renames only), so the
    previous root is intact even if no container starts again here."""
    try:
        recover(driver_root)
    except (DriverContainerError, OSError) as exc:
        log.warning("the interrupted publish is rolled back at the next start: %s", exc)


def require_usable_root(driver_root: Path, runner: Runner) -> None:
    """Before Ready: execute from and map from the published root for real (driverroot/proof.py); a root
    its consumers would fail on ends ``init`` here, with the flags found and the fix (docs/init.md, step 6b)."""
    proof = prove_root_usable(driver_root, runner)
    if proof.ok:
        log.debug("DRIVER_ROOT %s: executed %s and mapped a library executable", driver_root, PROOF_BINARY)
        return
    raise PublishError(
        f"the published driver root {driver_root} cannot be used by its consumers, not Ready: "
        f"{'; '.join(proof.failures)}; {proof.flags.describe()}",
        path=driver_root,
        fix=UNUSABLE_ROOT_FIX,
    )


def report_ready(published: Published, cluster: Cluster, stop: Callable[[], bool] | None = None) -> None:
    """Annotate the Node (after ``Ready``); a no-op outside a cluster, never fatal, 1.5 s at most; ``stop``
    (init's ``Shutdown.requested``) ends it within 50 ms of a signal."""
    from driver_container.kube.nodereport import READY, NodeVerdict, report  # lazy, hot path: after Ready

    state = published.state
    flavour = state.nvidia_version.flavour if state.nvidia_version else None
    # Warnings reach the Node too: a module parameter the running module does not have as requested
    # (PARAMETER_DIFFERS) is otherwise a log line nobody reads.
    warnings = "; ".join(f"{f.code}: {f.message}" for f in check(state) if f.severity == "warning") or None
    verdict = NodeVerdict(READY, published.version, flavour, state.module_files_source, warnings=warnings)
    report(verdict, cluster, stop=stop)


def check_published_root(paths: HostPaths) -> bool:
    """Hash DRIVER_ROOT against its manifest (whose digests may come from the image's index)."""
    from driver_container.driverroot.integrity import check_integrity_and_record  # lazy, hot path: in the child only

    return check_integrity_and_record(paths).ok


def after_ready(paths: HostPaths, published: Published, cluster: Cluster) -> bool:
    """In the background child of a waiting ``init``: the Node's annotations at normal priority (consumers
    and people look for them), then the hashing at the lowest (nice 19, SCHED_IDLE)."""
    report_ready(published, cluster)
    lowest_priority()
    return check_published_root(paths)
