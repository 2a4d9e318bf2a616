"""Why a SIGTERM ends the driver pod (kube/finalstop.py ``decide``), from the objects alone."""

from __future__ import annotations

from typing import Any

import pytest

from driver_container.kube.finalstop import decide, selects
from driver_container.kube.nodereport import PREFIX, build_of, clear_patch

DELETED = {"metadata": {"name": "p", "deletionTimestamp": "2026-12-07T04:00:00Z"}}
LIVE = {"metadata": {"name": "p"}}


def _ds(selector: dict[str, str] | None, **meta: Any) -> dict[str, Any]:
    template = {"spec": {"nodeSelector": selector}} if selector is not None else {"spec": {}}
    return {"metadata": {"name": "ds", **meta}, "spec": {"template": template}}


@pytest.mark.parametrize(
    ("pod", "daemonset", "labels", "kind"),
    [
        (LIVE, None, None, "restart"),
        (LIVE, _ds({"a": "b"}), {}, "restart"),
        (DELETED, None, None, "final"),
        (DELETED, _ds({"a": "b"}, deletionTimestamp="x"), None, "final"),
        (DELETED, _ds({"a": "b"}), {"a": "c"}, "final"),
        (DELETED, _ds({"a": "b"}), {"a": "b", "z": "1"}, "replaced"),
        (DELETED, _ds(None), {}, "replaced"),  # no nodeSelector: every node
        (DELETED, _ds({"a": "b"}), None, "unknown"),  # labels not read: keep everything
    ],
)
def test_decide(
    pod: dict[str, Any], daemonset: dict[str, Any] | None, labels: dict[str, str] | None, kind: str
) -> None:
    assert decide(pod, daemonset, labels).kind == kind


def test_selects_compares_every_key() -> None:
    assert selects(_ds({"a": "b", "c": "d"}), {"a": "b", "c": "d"})
    assert not selects(_ds({"a": "b", "c": "d"}), {"a": "b"})


def test_build_is_the_version_and_the_digest_alone() -> None:
    from driver_container import __version__

    assert build_of("ghcr.io/x/y@sha256:00") == f"{__version__}@sha256:00"
    assert build_of(None) == __version__


def test_clear_patch_removes_known_and_other_project_keys_only() -> None:
    patch = clear_patch({f"{PREFIX}extra": "1", "other/key": "2"})
    assert patch[f"{PREFIX}result"] is None and patch[f"{PREFIX}extra"] is None and "other/key" not in patch
    assert set(patch.values()) == {None}
