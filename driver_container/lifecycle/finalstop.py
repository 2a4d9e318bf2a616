"""What a waiting ``init`` does with the root and the node's verdict when a signal ends it, in a cluster.

kube/finalstop.py decides from the pod and its DaemonSet: a final stop unmounts the published root
(driverroot/unmount.py) and clears the verdict; a replacement to come marks it ``pending`` and keeps the
root; a container restart, or anything the API does not answer in time, keeps both, as before.

Bounded: all the API calls share ``API_BUDGET_S`` (connect, answers, the client's import) through the
client's stop hook, so SIGTERM is still answered within 2 s (tests/integration/test_verdict.py measures
it against a stalled API). Outside a cluster nothing here is imported (init.py checks first).
"""

from __future__ import annotations

import logging
import time

from driver_container.base.paths import HostPaths
from driver_container.driverroot.unmount import unmount_root
from driver_container.kube.client import KubeClient
from driver_container.kube.endpoint import KubeConfig, operator_namespace
from driver_container.kube.finalstop import StopDecision, settle_verdict
from driver_container.runtime.runner import Runner
from driver_container.settings import Cluster

log = logging.getLogger(__name__)

API_BUDGET_S = 1.0  # every API call of the decision and its patch together


def on_signal(paths: HostPaths, runner: Runner, cluster: Cluster) -> StopDecision:
    """After the daemons stopped: ask why this pod stops, write the verdict, unmount the root on a final stop."""
    deadline = time.monotonic() + API_BUDGET_S

    def client() -> KubeClient:
        left = max(deadline - time.monotonic(), 0.05)
        return KubeClient.for_cluster(
            cluster, KubeConfig(timeout=left, attempts=1), stop=lambda: time.monotonic() >= deadline
        )

    decision = settle_verdict(cluster.pod_name, cluster.node_name or "", operator_namespace(cluster), client)
    if decision.kind == "final":
        log.info("final stop (%s): unmounting the published root %s", decision.reason, paths.driver_root)
        unmount_root(paths, runner)
    else:
        log.info("%s is kept: %s", paths.driver_root, decision.reason)
    return decision
