"""The pod context driver-manager hands to init: format, binding to one pod and boot, bounded reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver_container.base.errors import VerdictFormatError
from driver_container.base.paths import HostPaths
from driver_container.inspect.podcontext import CONTEXT_FILE, PodContext, load_context, parse_context, render_context
from driver_container.manager import handoff

CONTEXT = PodContext(
    namespace="gpu-operator",
    pod="nvidia-driver-daemonset-abcde",
    boot_id="b0",
    driver_image="r/d:production-talosv1.13.8",
    template_image="r/d:production-talosv1.13.9",
    current=False,
    image_release="v1.13.8",
    node_release="v1.13.9",
    upgrade_managed=False,
    upgrade_state=None,
    eviction="refused",
    daemonset="nvidia-driver-daemonset",
)


def test_round_trip_and_the_delete_command() -> None:
    assert parse_context(render_context(CONTEXT)) == CONTEXT
    assert CONTEXT.delete_command == "kubectl delete pod -n gpu-operator nvidia-driver-daemonset-abcde"
    assert CONTEXT.foreign_release and not CONTEXT._replace(image_release="v1.13.9").foreign_release


@pytest.mark.parametrize(
    "change",
    [
        {"format": "talos-nvidia-driver/module-verdict"},
        {"format_version": 2},
        {"current": "yes"},
        {"upgrade_managed": None},
        {"eviction": "maybe"},
        {"pod": 7},
        {"namespace": None},
    ],
)
def test_malformed_documents_are_refused(change: dict[str, object]) -> None:
    doc = {**json.loads(render_context(CONTEXT)), **change}
    with pytest.raises(VerdictFormatError):
        parse_context(json.dumps(doc))


def _paths(tmp_path: Path, boot: str | None = "b0") -> HostPaths:
    """RUN_DIR and a procfs whose boot id is ``boot`` (None: unreadable)."""
    boot_id = tmp_path / "proc/sys/kernel/random/boot_id"
    boot_id.parent.mkdir(parents=True, exist_ok=True)
    boot_id.unlink(missing_ok=True)
    if boot is not None:
        boot_id.write_text(boot + "\n")
    (tmp_path / "run").mkdir(exist_ok=True)
    return HostPaths(run_dir=tmp_path / "run", procfs_root=tmp_path / "proc")


def test_only_this_pod_in_this_boot(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths = _paths(tmp_path)
    assert load_context(paths, CONTEXT.pod) is None  # none written
    handoff.write_pod_context(paths.run_dir, CONTEXT)
    assert load_context(paths, CONTEXT.pod) == CONTEXT
    assert load_context(paths, "nvidia-driver-daemonset-other") is None
    assert load_context(paths, None) is None
    assert load_context(_paths(tmp_path, "b1"), CONTEXT.pod) is None  # after a reboot
    assert load_context(_paths(tmp_path, None), CONTEXT.pod) is None  # this boot unknown
    assert "another pod or boot" in caplog.text
    handoff.remove_pod_context(paths.run_dir)
    assert not (paths.run_dir / CONTEXT_FILE).exists()


def test_a_link_or_an_oversized_file_is_never_trusted(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    (paths.run_dir / CONTEXT_FILE).symlink_to("/dev/zero")
    assert load_context(paths, CONTEXT.pod) is None
    (paths.run_dir / CONTEXT_FILE).unlink()
    (paths.run_dir / CONTEXT_FILE).write_text(" " * (65 << 10) + render_context(CONTEXT))
    assert load_context(paths, CONTEXT.pod) is None
    handoff.write_pod_context(paths.run_dir, CONTEXT)  # replaces it atomically
    assert load_context(paths, CONTEXT.pod) == CONTEXT


def test_eviction_mark_is_one_uid(tmp_path: Path) -> None:
    assert handoff.evicted_uid(tmp_path) is None
    handoff.mark_eviction(tmp_path, "uid-1")
    assert handoff.evicted_uid(tmp_path) == "uid-1"
    handoff.mark_eviction(tmp_path, "uid-2")
    assert handoff.evicted_uid(tmp_path) == "uid-2"
