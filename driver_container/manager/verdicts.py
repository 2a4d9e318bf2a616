"""The node's verdict from driver-manager (kube/nodereport.py; docs/operator.md, "The node's verdict").

``pending`` before anything else: the operator runs ``uninstall_driver`` as the driver pod's init
container, before ``init``, so an earlier pod's ``ready`` never stands while this pod starts, waits or
never starts its driver container (an image-pull failure of it leaves ``pending`` naming this pod).
``pre-installed`` when the node's driver is the host's: the operator then deletes this pod, and the
verdict says why instead of the last ``ready``. Never fatal, a no-op outside a cluster (nodereport).
"""

from __future__ import annotations

from pathlib import PurePosixPath

from driver_container.kube.nodereport import PENDING, PRE_INSTALLED, NodeVerdict, report
from driver_container.manager.labels import DRIVER_DEPLOY_LABEL, relabel_command
from driver_container.manager.labels import PRE_INSTALLED as PRE_INSTALLED_LABEL
from driver_container.settings import Cluster


def mark_pending(cluster: Cluster) -> bool:
    return report(NodeVerdict(PENDING, reason="driver-manager started this pod; init has not answered yet"), cluster)


def mark_pre_installed(cluster: Cluster, node: str, host_smi: PurePosixPath | None) -> bool:
    reason = (
        f"host nvidia-smi {host_smi} found: the driver is pre-installed, node labelled "
        f"{DRIVER_DEPLOY_LABEL}={PRE_INSTALLED_LABEL}; to use the driver container, remove the NVIDIA "
        f"userspace extension, then run `{relabel_command(node)}`"
    )
    return report(NodeVerdict(PRE_INSTALLED, reason=reason), cluster)
