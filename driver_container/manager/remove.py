"""``driver-manager uninstall``: what removing this project leaves to undo on a node.

The published root's tmpfs and its mounts (driverroot/unmount.py) stay in the node's memory until reboot
when nothing unmounts them, and the ``nvidia-driver-container/`` annotations keep describing a driver
pod that is gone. A driver pod deleted for good does both itself (lifecycle/finalstop.py); this command
is for a node where it could not (the API did not answer, the pod was force-deleted, the DaemonSet was
removed with ``--cascade=orphan``). Idempotent: a second run finds nothing and says so. Talos owns the
modules: the runner refuses modprobe, rmmod and insmod, so nothing is ever unloaded.
"""

from __future__ import annotations

import logging

from driver_container.base.errors import PublishError
from driver_container.base.paths import HostPaths
from driver_container.driverroot.unmount import mounted_at_or_below, unmount_root
from driver_container.kube import nodereport
from driver_container.runtime.runner import MODULE_TOOLS, Runner
from driver_container.settings import Cluster

log = logging.getLogger(__name__)


def run_remove(paths: HostPaths, runner: Runner, cluster: Cluster) -> str:
    """Unmount DRIVER_ROOT and clear the node's verdict; a one-line summary. PublishError when a mount is
    left, KubernetesError when the API refuses the annotations."""
    runner = runner.forbid(MODULE_TOOLS)
    unmounted = unmount_root(paths, runner)
    left = mounted_at_or_below(paths)
    if left:
        raise PublishError(
            f"still mounted at or below DRIVER_ROOT {paths.driver_root}: {', '.join(left)}",
            path=paths.driver_root,
            fix=f"see the warnings above; on the host: umount -l -R {paths.host_driver_root}, or reboot the node",
        )
    root = f"unmounted {', '.join(unmounted)}" if unmounted else f"nothing mounted at {paths.driver_root}"
    cleared = nodereport.clear(cluster)
    verdict = (
        f"node {cluster.node_name}: {nodereport.PREFIX}* annotations removed"
        if cleared
        else "not in a cluster (NODE_NAME, KUBERNETES_SERVICE_HOST/KUBECONFIG): no annotation touched"
    )
    return f"{root}; {verdict}"
