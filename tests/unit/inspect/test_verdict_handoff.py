"""driver-manager -> init: the module-file verdict in RUN_DIR, on the committed fixture hosts.

The manager sees the host root (the operator's init container has /host); init is given an empty
HOST_ROOT_MOUNT (the main container has none) and the same RUN_DIR, /proc and /sys.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from helpers.support import FIXTURES, fixture_paths

from driver_container.base.errors import VerdictFormatError
from driver_container.base.paths import HostPaths
from driver_container.findings import check
from driver_container.inspect.hoststate import inspect_host
from driver_container.inspect.verdict import (
    BOOT_ID,
    FORMAT_VERSION,
    VERDICT_FILE,
    Binding,
    parse_verdict,
    stale_reason,
)
from driver_container.lifecycle.status_render import status_json
from driver_container.manager.manager import hand_verdict_to_init
from driver_container.settings import Settings

DIGEST = "digest-1"
SETTINGS = Settings(driver_config_digest=DIGEST)


def _node(tmp_path: Path, name: str) -> tuple[HostPaths, HostPaths]:
    """(manager's paths, init's paths) on a private copy of the fixture, with a boot id."""
    tree = Path(shutil.copytree(FIXTURES / "hosts" / name, tmp_path / name, symlinks=True))
    (tree / "proc" / BOOT_ID).parent.mkdir(parents=True, exist_ok=True)
    (tree / "proc" / BOOT_ID).write_text("3f0c2b1e-0000-4000-8000-000000000001\n")
    (tree / "run").mkdir()
    (tmp_path / "no-host").mkdir()
    manager = fixture_paths(tree)
    return manager, manager._replace(host_root=tmp_path / "no-host")


def _codes(paths: HostPaths, settings: Settings = SETTINGS) -> dict[str, str]:
    return {f.code: f.severity for f in check(inspect_host(paths, settings))}


def test_a_mismatching_file_read_by_the_manager_stops_init(tmp_path: Path) -> None:
    manager, init = _node(tmp_path, "talos-1.13-srcversion-mismatch")
    assert "MODULE_FILE_MISMATCH" not in _codes(init)  # without the verdict init cannot see it
    note = hand_verdict_to_init(manager, SETTINGS, DIGEST)
    assert "mismatch, init will refuse" in note
    state = inspect_host(init, SETTINGS)
    assert state.module_files_source == f"driver-manager verdict {init.run_dir / VERDICT_FILE}"
    errors = {f.code for f in check(state) if f.severity == "error"}
    assert "MODULE_FILE_MISMATCH" in errors
    assert status_json(state, check(state))["module_files_source"].startswith("driver-manager verdict")
    from driver_container.lifecycle.status_render import render_text

    assert "module files: from driver-manager verdict" in render_text(state, check(state))  # `status` says where from


def test_a_matching_verdict_verifies_and_carries_the_firmware_names(tmp_path: Path) -> None:
    manager, init = _node(tmp_path, "talos-1.13-open-595")
    assert "match (" in hand_verdict_to_init(manager, SETTINGS, DIGEST)
    state = inspect_host(init, SETTINGS)
    assert "MODULE_FILE_MISSING" not in {f.code for f in check(state)}
    assert state.module_files["nvidia"].flavour == "open"
    assert state.firmware  # names from the file, located as init would (None where absent)
    doc = json.loads((init.run_dir / VERDICT_FILE).read_text())
    assert doc["format_version"] == FORMAT_VERSION and doc["digest"] == DIGEST
    assert doc["boot_id"] == "3f0c2b1e-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    ("change", "what"),
    [("boot", "boot_id"), ("digest", "digest"), ("garbage", "ignored, not JSON")],
)
def test_a_stale_or_broken_verdict_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, change: str, what: str
) -> None:
    manager, init = _node(tmp_path, "talos-1.13-srcversion-mismatch")
    hand_verdict_to_init(manager, SETTINGS, DIGEST)
    settings = SETTINGS
    if change == "boot":  # the node rebooted; RUN_DIR kept (not Talos's tmpfs /run)
        (init.procfs_root / BOOT_ID).write_text("3f0c2b1e-0000-4000-8000-000000000002\n")
    elif change == "digest":
        settings = Settings(driver_config_digest="digest-2")
    else:
        (init.run_dir / VERDICT_FILE).write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="driver_container.inspect.verdict"):
        state = inspect_host(init, settings)
    assert state.module_files_source == "none"
    codes = {f.code: f.severity for f in check(state)}
    assert "MODULE_FILE_MISMATCH" not in codes and codes.get("MODULE_FILE_MISSING") == "info"
    assert any(what in r.getMessage() for r in caplog.records), caplog.text
    if change != "garbage":
        assert "stale verdict" in caplog.text


def test_no_host_root_at_the_manager_removes_an_old_verdict(tmp_path: Path) -> None:
    manager, init = _node(tmp_path, "talos-1.13-open-595")
    hand_verdict_to_init(manager, SETTINGS, DIGEST)
    assert "no module-file verdict" in hand_verdict_to_init(init, SETTINGS, DIGEST)
    assert not (init.run_dir / VERDICT_FILE).exists()


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"format": "other"}',
        '{"format": "talos-nvidia-driver/module-verdict", "format_version": 2}',
        '{"format": "talos-nvidia-driver/module-verdict", "format_version": 1, "module_files": [{"name": 3}]}',
        '{"format": "talos-nvidia-driver/module-verdict", "format_version": 1, "module_files": {}}',
        '{"format": "talos-nvidia-driver/module-verdict", "format_version": 1, "boot_id": 1, "module_files": []}',
        "[" * 100_000,
        '{"format": "talos-nvidia-driver/module-verdict", "format_version": 1, "findings": [],'
        ' "module_files": [{"name": "nvidia", "path": "/x/nvidia.ko", "flavour": "closed"}]}',
    ],
)
def test_parse_refuses_what_it_did_not_write(text: str) -> None:
    with pytest.raises(VerdictFormatError):
        parse_verdict(text)


def test_stale_reason_needs_boot_digest_and_release_to_match() -> None:
    here = Binding("b", "d", "595.91.07", "6.18.24-talos")
    assert stale_reason(here, here) is None
    assert "this boot's id" in (stale_reason(here, here._replace(boot_id=None)) or "")
    for field in ("boot_id", "digest", "kernel_release"):
        assert field in (stale_reason(here._replace(**{field: "x"}), here) or "")


def test_a_manager_image_of_another_version_still_hands_its_verdict_over() -> None:
    """driver.manager.version may lag driver.version: the files' facts do not depend on the userspace, so
    init (595.91.07) takes the verdict of a 580.178.04 manager instead of checking nothing."""
    here = Binding("b", "d", "595.91.07", "6.18.24-talos")
    assert stale_reason(here._replace(image_version="580.178.04"), here) is None
