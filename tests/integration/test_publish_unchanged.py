"""An unchanged restart recognised without the publisher (publish/unchanged.py, bench/startup.py), and every
change that must send a restart back through the full publish, on the synthetic userspace with an index."""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.support import SYNTHETIC_VERSION, require

from driver_container.base.paths import HostPaths
from driver_container.driverroot.journal import JOURNAL, STAGING
from driver_container.driverroot.manifest import read_manifest
from driver_container.formats.userspace_layout import DIGEST_INDEX
from driver_container.publish.index_build import build_index
from driver_container.publish.publisher import publish_driver_root
from driver_container.publish.unchanged import unchanged_manifest
from driver_container.runtime.runner import Runner

LIBDIR = "usr/lib/x86_64-linux-gnu"
LIB = f"{LIBDIR}/libnvidia-ml.so.{SYNTHETIC_VERSION}"


def _touch(path: Path, delta_ns: int = 1_000_000_000) -> None:
    st = path.stat(follow_symlinks=False)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + delta_ns), follow_symlinks=False)


@pytest.fixture
def published(userspace: Path, tmp_path: Path) -> HostPaths:
    """A first publish of the synthetic userspace with the image's index, as in the image."""
    real = shutil.which("ldconfig") or "/sbin/ldconfig"
    require(Path(real).exists(), "a static ldconfig", how="apt-get install libc-bin")
    (userspace / "sbin").mkdir(exist_ok=True)
    shutil.copy(real, userspace / "sbin/ldconfig.real")
    build_index(HostPaths(userspace_root=userspace).userspace, SYNTHETIC_VERSION, Runner())
    paths = HostPaths(userspace_root=userspace, driver_root_override=tmp_path / "driver", run_dir=tmp_path / "run")
    publish_driver_root(paths, SYNTHETIC_VERSION, Runner())
    return paths


def test_a_published_root_with_its_inputs_is_recognised(published: HostPaths) -> None:
    manifest = unchanged_manifest(published.driver_root, published.userspace, SYNTHETIC_VERSION)
    assert manifest is not None and manifest.inputs and manifest.cache is not None
    cache = (published.driver_root / "etc/ld.so.cache").stat()
    assert manifest.cache == (cache.st_size, cache.st_mtime_ns)
    full = publish_driver_root(published, SYNTHETIC_VERSION, Runner(), check_unchanged=False)  # the full path agrees
    assert (full.written, full.removed, full.ldconfig_ran) == (0, 0, False)
    assert (
        unchanged_manifest(published.driver_root, published.userspace, SYNTHETIC_VERSION) == manifest
    )  # and rewrote no manifest
    # The publisher's own shortcut reports what the full path reported, without a scan.
    kept = publish_driver_root(published, SYNTHETIC_VERSION, Runner())
    same = ("written", "unchanged", "removed", "libraries", "binaries", "firmware", "ldconfig_ran")
    assert [getattr(kept, f) for f in same] == [getattr(full, f) for f in same]
    assert full.unchanged > 0 and full.libraries and full.binaries


def test_a_publish_decides_the_mount_of_driver_root_once(
    published: HostPaths, caplog: pytest.LogCaptureFixture
) -> None:
    """The unchanged check and the full publish it sends the restart to share one mount decision
    (publish/rootdir.py ``prepare_existing_root``): one statvfs and mountinfo read, one log line."""
    _touch(published.driver_root / LIB)
    with caplog.at_level(logging.INFO, logger="driver_container.driverroot.mount"):
        report = publish_driver_root(published, SYNTHETIC_VERSION, Runner())
    assert report.written == 1  # the full path ran
    decisions = [r for r in caplog.records if r.getMessage().startswith("DRIVER_ROOT mount: ")]
    assert len(decisions) == 1, decisions


CHANGES: dict[str, Callable[[HostPaths], None]] = {
    "a published file's mtime": lambda p: _touch(p.driver_root / LIB),
    "a published file's mode": lambda p: (p.driver_root / LIB).chmod(0o600),
    "a published file removed": lambda p: (p.driver_root / LIB).unlink(),
    "a link's target": lambda p: _relink(p.driver_root / f"{LIBDIR}/libnvidia-ml.so.1", "elsewhere.so"),
    "ld.so.cache rewritten": lambda p: _touch(p.driver_root / "etc/ld.so.cache"),
    "a source's mtime": lambda p: _touch(p.userspace.path / LIBDIR / "nvidia/current" / Path(LIB).name),
    "the image's index": lambda p: _touch(p.userspace.path / DIGEST_INDEX),
    "a journal left": lambda p: (p.driver_root / JOURNAL).write_text("{}"),
    "a staging left": lambda p: (p.driver_root / STAGING).mkdir(),
}


def _relink(link: Path, target: str) -> None:
    link.unlink()
    link.symlink_to(target)


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_any_change_takes_the_full_publish(published: HostPaths, change: str) -> None:
    assert unchanged_manifest(published.driver_root, published.userspace, SYNTHETIC_VERSION) is not None
    CHANGES[change](published)
    assert unchanged_manifest(published.driver_root, published.userspace, SYNTHETIC_VERSION) is None, change


def test_another_version_or_path_takes_the_full_publish(published: HostPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    assert unchanged_manifest(published.driver_root, published.userspace, "595.91.08") is None
    monkeypatch.setenv("PATH", "/nonexistent:" + os.environ.get("PATH", ""))  # ldconfig may be found elsewhere
    assert unchanged_manifest(published.driver_root, published.userspace, SYNTHETIC_VERSION) is None


def test_without_the_image_index_every_restart_takes_the_full_publish(userspace: Path, tmp_path: Path) -> None:
    paths = HostPaths(userspace_root=userspace, driver_root_override=tmp_path / "driver", run_dir=tmp_path / "run")
    publish_driver_root(paths, SYNTHETIC_VERSION, Runner())
    _text, manifest = read_manifest(paths.driver_root)
    assert manifest is not None and manifest.inputs == "" and manifest.cache is not None
    assert unchanged_manifest(paths.driver_root, paths.userspace, SYNTHETIC_VERSION) is None


def test_a_manifest_of_the_previous_format_is_rewritten_once(published: HostPaths) -> None:
    """A root published by the code before this one (no inputs): the full path rewrites only the manifest."""
    manifest_file = published.driver_root / ".driver-container/manifest.json"
    body = json.loads(manifest_file.read_text())
    del body["inputs"], body["cache"]
    manifest_file.write_text(json.dumps(body))
    assert unchanged_manifest(published.driver_root, published.userspace, SYNTHETIC_VERSION) is None
    report = publish_driver_root(published, SYNTHETIC_VERSION, Runner())
    assert (report.written, report.ldconfig_ran) == (0, False)
    assert unchanged_manifest(published.driver_root, published.userspace, SYNTHETIC_VERSION) is not None
