"""The pod context that ``driver-manager`` hands to ``init`` through RUN_DIR.

Only the init container asks the API about its own pod (manager/heal.py): whether the pod is current with
its DaemonSet's template, which Talos release its image's tag names, whether the operator's upgrade
controller manages the node and in which state, and what became of an eviction. ``init`` reads it here to
name the right fix when it refuses (findings/pod.py). Like the module-file verdict (verdict.py) the file is
bound to what it was written for: this pod (``POD_NAME``, else ``HOSTNAME``: the pod's name, ownpod.py) and
this boot. A context of another pod or boot, another format, or one that does not parse is ignored with a
warning, never trusted and never fatal. Pure parsing (``parse_context``) is separate from the I/O.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final

from driver_container.base.errors import DriverContainerError, JsonFormatError, VerdictFormatError
from driver_container.base.paths import HostPaths
from driver_container.base.records import NamedRecord
from driver_container.formats.boundedjson import decode_json
from driver_container.inspect.verdict import current_binding

log = logging.getLogger(__name__)

FORMAT: Final = "talos-nvidia-driver/pod-context"
FORMAT_VERSION: Final = 1
CONTEXT_FILE: Final = "nvidia-driver.pod-context.json"  # in RUN_DIR, beside the module-file verdict
CONTEXT_LIMIT: Final = 64 << 10  # a few hundred bytes of names
UPGRADE_FAILED: Final = "upgrade-failed"  # k8s-operator-libs pkg/upgrade/consts.go UpgradeStateFailed
# What became of this pod's eviction (manager/heal.py).
EVICTION_OUTCOMES: Final = ("not-needed", "kept", "evicted", "refused")


class PodContext(NamedRecord):
    namespace: str
    pod: str
    boot_id: str | None
    driver_image: str | None  # this pod's nvidia-driver-ctr image
    template_image: str | None  # the same container's image in the DaemonSet's current template
    current: bool | None  # this pod's images equal the template's (None: the template is unknown)
    image_release: str | None  # the Talos release this pod's driver image tag names (``-talos<R>``)
    node_release: str | None  # the Talos release the node runs (its os-release VERSION_ID)
    upgrade_managed: bool  # nvidia.com/gpu-driver-upgrade-enabled=true on the node
    upgrade_state: str | None  # nvidia.com/gpu-driver-upgrade-state on the node
    eviction: str  # one of EVICTION_OUTCOMES
    daemonset: str | None = None
    image_channel: str | None = None  # production | lts, where this pod's tag names a channel
    image_driver: str | None = None  # the driver version this pod's tag names, where it names one

    @property
    def delete_command(self) -> str:
        return f"kubectl delete pod -n {self.namespace} {self.pod}"

    @property
    def foreign_release(self) -> bool:
        """The image's tag names another Talos release than the node runs (both known)."""
        return bool(self.image_release and self.node_release and self.image_release != self.node_release)


_STR_FIELDS: Final = (
    "boot_id",
    "driver_image",
    "template_image",
    "image_release",
    "node_release",
    "daemonset",
    "image_channel",
    "image_driver",
)


def render_context(context: PodContext) -> str:
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, **context._asdict()}
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def _text(doc: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = doc.get(key)
    if (value is None and required) or (value is not None and not isinstance(value, str)):
        raise VerdictFormatError(f"{key}: expected a string, got {type(value).__name__}", key=key)
    return value


def parse_context(text: str) -> PodContext:
    """The document written by ``render_context``; VerdictFormatError for anything else."""
    try:
        doc = decode_json(text, limit=CONTEXT_LIMIT)
    except JsonFormatError as exc:
        raise VerdictFormatError(str(exc)) from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise VerdictFormatError(f"not a {FORMAT} document", key="format")
    if doc.get("format_version") != FORMAT_VERSION:
        raise VerdictFormatError(f"format_version {doc.get('format_version')!r}, this image reads 1", key="format")
    current, managed, eviction = doc.get("current"), doc.get("upgrade_managed"), doc.get("eviction")
    if (current is not None and not isinstance(current, bool)) or not isinstance(managed, bool):
        raise VerdictFormatError("current and upgrade_managed must be booleans", key="current")
    if eviction not in EVICTION_OUTCOMES:
        raise VerdictFormatError(f"eviction: expected one of {', '.join(EVICTION_OUTCOMES)}", key="eviction")
    return PodContext(
        namespace=str(_text(doc, "namespace", required=True)),
        pod=str(_text(doc, "pod", required=True)),
        current=current,
        upgrade_managed=managed,
        upgrade_state=_text(doc, "upgrade_state"),
        eviction=str(eviction),
        **{key: _text(doc, key) for key in _STR_FIELDS},
    )


def stale_reason(context: PodContext, pod: str | None, boot_id: str | None) -> str | None:
    """Why a context does not apply to this pod and boot, or None when it does."""
    if pod is None or context.pod != pod:
        return f"it was written for pod {context.pod!r}, this is {pod!r}"
    if boot_id is None or context.boot_id != boot_id:
        return f"it was written in boot {context.boot_id!r}, this is {boot_id!r}"
    return None


# -- I/O ------------------------------------------------------------------------------------------


def load_context(paths: HostPaths, pod: str | None) -> PodContext | None:
    """RUN_DIR's pod context when it was written for ``pod`` in this boot; None (one warning) otherwise."""
    where = paths.run_dir / CONTEXT_FILE
    try:
        text = paths.run.read_text_or_none(CONTEXT_FILE, limit=CONTEXT_LIMIT)
        if text is None:
            return None
        context = parse_context(text)
    except DriverContainerError as exc:
        log.warning("%s: ignored, %s", where, exc.message)
        return None
    # The boot id only once a context exists: most hosts (standalone, no manager) have none.
    reason = stale_reason(context, pod, current_binding(paths.proc, None, None, None).boot_id)
    if reason is not None:
        log.warning("%s: pod context of another pod or boot ignored: %s", where, reason)
        return None
    return context
