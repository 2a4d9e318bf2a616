"""status and init's verify step on DRIVER_ROOT's mount: the mount in the JSON and the text, the
DRIVER_ROOT_NOT_EXECUTABLE finding for a published root on a noexec/nodev filesystem."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.support import FIXTURES, fixture_paths

from driver_container.cli.status_render import render_text, status_json
from driver_container.findings import check
from driver_container.inspect.hoststate import HostState, inspect_host
from driver_container.lifecycle.verify import verify
from driver_container.paths import HostPaths
from driver_container.publish.manifest import Manifest, format_manifest
from driver_container.settings import Settings

HOST = FIXTURES / "hosts" / "talos-1.13-open-595"  # no finding of its own (tests/integration/test_status.py)
TALOS_RUN = "30 1 0:26 / {run} rw,nosuid,nodev,noexec,relatime shared:18 - tmpfs none rw,mode=755\n"
OURS = "40 30 0:52 / {run}/driver rw,nosuid,relatime shared:44 - tmpfs nvidia-driver-root rw,mode=755\n"


@pytest.fixture
def paths(tmp_path: Path) -> HostPaths:
    tree = Path(shutil.copytree(HOST, tmp_path / "tree", symlinks=True))
    (tree / "proc/self").mkdir()
    return fixture_paths(tree)


def _state(paths: HostPaths, mountinfo: str, *, published: bool) -> HostState:
    (paths.procfs_root / "self/mountinfo").write_text(mountinfo.format(run=paths.run_dir))
    if published:
        (paths.driver_root / ".driver-container").mkdir(parents=True)
        manifest = format_manifest(Manifest("595.91.07", "x86_64-linux-gnu", ()))  # "{}" claims nothing
        (paths.driver_root / ".driver-container/manifest.json").write_text(manifest)
    return inspect_host(paths, Settings())


def test_published_root_on_noexec_run_is_an_error_naming_the_flags(paths: HostPaths) -> None:
    state = _state(paths, TALOS_RUN, published=True)
    found = [f for f in check(state) if f.code == "DRIVER_ROOT_NOT_EXECUTABLE"]
    assert len(found) == 1 and found[0].severity == "error"
    assert "rw,nosuid,nodev,noexec,relatime" in found[0].message
    assert "noexec: nothing in it can be run" in found[0].message and "nodev:" in found[0].message
    assert "CAP_SYS_ADMIN" in found[0].fix
    mount = status_json(state, check(state))["driver_root"]["mount"]
    assert mount == {
        "mount_point": str(paths.run_dir), "fstype": "tmpfs", "source": "none",
        "options": ["rw", "nosuid", "nodev", "noexec", "relatime"], "ours": False,
    }  # fmt: skip
    assert f"  mount {paths.run_dir} tmpfs none rw,nosuid,nodev,noexec,relatime" in render_text(state, check(state))


def test_init_verify_goes_on_because_init_is_the_fix(paths: HostPaths) -> None:
    _state(paths, TALOS_RUN, published=True)
    state = verify(paths, Settings())  # raises VerificationError on any other error finding
    assert "DRIVER_ROOT_NOT_EXECUTABLE" in {f.code for f in check(state)}


def test_unpublished_root_on_noexec_is_no_error_yet(paths: HostPaths) -> None:
    state = _state(paths, TALOS_RUN, published=False)
    assert "DRIVER_ROOT_NOT_EXECUTABLE" not in {f.code for f in check(state)}


def test_our_tmpfs_is_shown_and_clean(paths: HostPaths) -> None:
    state = _state(paths, TALOS_RUN + OURS, published=True)
    assert [f for f in check(state) if f.severity == "error"] == []
    mount = status_json(state, check(state))["driver_root"]["mount"]
    assert mount["mount_point"] == str(paths.driver_root) and mount["ours"] is True
    assert mount["options"] == ["rw", "nosuid", "relatime"]
