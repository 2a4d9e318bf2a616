"""The image's static shell published as bin/sh with an empty dev/shm (docs/mps.md: MPS through NVIDIA's
DRA driver), on the synthetic userspace (tests/fixtures/userspace/debian-595.91.07).

The busybox here is a stand-in: the host's glibc ldconfig, a static x86_64 ELF, which is all the scan
checks (publish/static_tools.py); tests/integration/test_mps_real.py runs Debian's real busybox-static as
``sh`` in real published roots.
"""

from __future__ import annotations

import json
import logging
import shutil
import stat
from pathlib import Path

import pytest
from helpers.support import require
from test_publish import host

from driver_container.base.paths import HostPaths
from driver_container.driverroot.integrity import check_integrity
from driver_container.publish.index_build import build_index
from driver_container.publish.publisher import publish_driver_root
from driver_container.publish.unchanged import unchanged_manifest
from driver_container.runtime.runner import Runner

V = "595.91.07"


def _static_elf() -> Path:
    found = shutil.which("ldconfig")
    require(found, "a static ldconfig on PATH", how="apt-get install libc-bin")
    return Path(str(found)).resolve()


def _records(root: Path) -> dict[str, dict[str, object]]:
    return {r["path"]: r for r in json.loads((root / ".driver-container/manifest.json").read_text())["files"]}


def test_a_static_busybox_becomes_bin_sh_and_dev_shm_a_recorded_directory(userspace: Path, tmp_path: Path) -> None:
    shutil.copy2(_static_elf(), userspace / "usr/bin/busybox")
    dr = tmp_path / "driver"
    publish_driver_root(host(userspace, dr), V, Runner())
    sh = (dr / "bin/sh").lstat()
    assert stat.S_ISREG(sh.st_mode) and stat.S_IMODE(sh.st_mode) == 0o755
    assert (dr / "bin/sh").read_bytes() == (userspace / "usr/bin/busybox").read_bytes()
    for directory in ("dev/shm", "proc", "sys"):  # mount points: the claim's shm; init's sysfs; proc stays empty
        assert stat.S_ISDIR((dr / directory).lstat().st_mode) and not any((dr / directory).iterdir())
        assert _records(dr)[directory]["type"] == "dir"
    again = publish_driver_root(host(userspace, dr), V, Runner(), check_unchanged=False)
    assert (again.written, again.removed, again.ldconfig_ran) == (0, 0, False)  # a restart writes nothing
    assert check_integrity(dr).ok


def test_a_missing_dev_shm_is_a_finding_and_the_next_publish_makes_it_again(userspace: Path, tmp_path: Path) -> None:
    shutil.copy2(_static_elf(), userspace / "usr/bin/busybox")
    dr = tmp_path / "driver"
    publish_driver_root(host(userspace, dr), V, Runner())
    (dr / "dev/shm").rmdir()
    (dr / "dev/shm").write_text("not a directory\n")
    assert [(m.path, m.reason) for m in check_integrity(dr).mismatches] == [("dev/shm", "a file, not a directory")]
    (dr / "dev/shm").unlink()
    assert [(m.path, m.reason) for m in check_integrity(dr).mismatches] == [("dev/shm", "missing")]
    report = publish_driver_root(host(userspace, dr), V, Runner(), check_unchanged=False)
    assert report.written == 1 and (dr / "dev/shm").is_dir() and check_integrity(dr).ok


def test_without_a_static_shell_the_root_gets_neither(
    userspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shutil.copy2(userspace / "usr/lib/nvidia/current/nvidia-smi", userspace / "usr/bin/busybox")  # a dynamic ELF
    dr = tmp_path / "driver"
    with caplog.at_level(logging.WARNING):
        publish_driver_root(host(userspace, dr), V, Runner())
    assert not (dr / "bin").exists() and not (dr / "dev").exists()
    assert "USERSPACE_ROOT/usr/bin/busybox is not a static EM_X86_64 ELF binary" in caplog.text


def test_a_shell_gone_from_the_image_leaves_the_root_with_its_directories(userspace: Path, tmp_path: Path) -> None:
    shutil.copy2(_static_elf(), userspace / "usr/bin/busybox")
    dr = tmp_path / "driver"
    publish_driver_root(host(userspace, dr), V, Runner())
    (userspace / "usr/bin/busybox").unlink()
    report = publish_driver_root(host(userspace, dr), V, Runner())
    # bin/sh only: a directory published for its own sake may be a mount point (proc, sys: driverroot/procsys.py),
    # where removing it fails with EBUSY; it stays, no longer recorded.
    assert report.removed == 1 and not (dr / "bin/sh").exists()
    for directory in ("dev/shm", "proc", "sys"):
        assert (dr / directory).is_dir() and directory not in _records(dr)
    assert check_integrity(dr).ok


def test_an_unchanged_restart_sees_dev_shm_gone_or_replaced(userspace: Path, tmp_path: Path) -> None:
    """publish/unchanged.py: a restart that finds the directory as recorded writes nothing; one that does not
    takes the full publish, which makes it again."""
    shutil.copy2(_static_elf(), userspace / "usr/bin/busybox")
    build_index(HostPaths(userspace_root=userspace).userspace, V, Runner())
    paths = HostPaths(userspace_root=userspace, driver_root_override=tmp_path / "driver", run_dir=tmp_path / "run")
    publish_driver_root(paths, V, Runner())
    assert unchanged_manifest(paths.driver_root, paths.userspace, V) is not None
    shm = paths.driver_root / "dev/shm"
    shm.rmdir()
    assert unchanged_manifest(paths.driver_root, paths.userspace, V) is None
    shm.write_text("")
    assert unchanged_manifest(paths.driver_root, paths.userspace, V) is None
    shm.unlink()
    assert publish_driver_root(paths, V, Runner()).written == 1 and shm.is_dir()
    assert unchanged_manifest(paths.driver_root, paths.userspace, V) is not None
