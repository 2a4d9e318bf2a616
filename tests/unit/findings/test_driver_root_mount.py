"""status on DRIVER_ROOT: the mount (our own mountinfo), the flags (statvfs) and the proof in the JSON and
the text; DRIVER_ROOT_NOT_EXECUTABLE comes from the proof init makes before Ready (driverroot/proof.py),
run for real on a tmpfs with Talos's /run flags (helpers/mounts.py), never from a mount table."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.mounts import tmpfs
from helpers.support import FIXTURES, fixture_paths

from driver_container.base.paths import HostPaths
from driver_container.driverroot.manifest import Manifest, format_manifest
from driver_container.driverroot.proof import PROOF_BINARY
from driver_container.findings import check
from driver_container.inspect.hoststate import HostState
from driver_container.lifecycle.hostcheck import check_host
from driver_container.lifecycle.status import inspect_for_status
from driver_container.lifecycle.status_render import render_text, status_json
from driver_container.settings import Settings

HOST = FIXTURES / "hosts" / "talos-1.13-open-595"  # no finding of its own (tests/integration/test_status.py)
LIBDIR = "usr/lib/x86_64-linux-gnu"
# The host view's mount table, saying the opposite of the kernel: it must not matter.
HOST_VIEW_LIE = "30 1 0:26 / {run} rw,nosuid,nodev,noexec,relatime shared:18 - tmpfs none rw,mode=755\n"


def _tree(tmp_path: Path) -> HostPaths:
    tree = Path(shutil.copytree(HOST, tmp_path / "tree", symlinks=True))
    paths = fixture_paths(tree, run=tmp_path / "run")
    (tree / "proc/self").mkdir()
    (tree / "proc/self/mountinfo").write_text(HOST_VIEW_LIE.format(run=paths.run_dir))
    return paths


@pytest.fixture
def exec_paths(tmp_path: Path) -> HostPaths:
    return _tree(tmp_path)


@pytest.fixture
def noexec_paths(tmp_path: Path) -> Iterator[HostPaths]:
    with tmpfs(tmp_path / "run"):
        yield _tree(tmp_path)


def _publish(paths: HostPaths) -> None:
    """A published root as far as status and the proof look: a manifest, the static ldconfig, NVML."""
    root = paths.driver_root
    (root / ".driver-container").mkdir(parents=True)
    manifest = format_manifest(Manifest("595.91.07", "x86_64-linux-gnu", ()))  # "{}" claims nothing
    (root / ".driver-container/manifest.json").write_text(manifest)
    (root / "sbin").mkdir()
    shutil.copy2(shutil.which("ldconfig") or "/sbin/ldconfig", root / PROOF_BINARY)
    (root / LIBDIR).mkdir(parents=True)
    shutil.copy2(root / PROOF_BINARY, root / LIBDIR / "libnvidia-ml.so.1")


def _status(paths: HostPaths) -> HostState:
    return inspect_for_status(paths, Settings())


def test_published_root_on_noexec_run_is_an_error_with_what_the_kernel_said(noexec_paths: HostPaths) -> None:
    _publish(noexec_paths)
    state = _status(noexec_paths)
    found = [f for f in check(state) if f.code == "DRIVER_ROOT_NOT_EXECUTABLE"]
    assert len(found) == 1 and found[0].severity == "error"
    message = found[0].message
    assert f"executing {noexec_paths.driver_root / PROOF_BINARY}: " in message and "Permission denied" in message
    assert "(mmap PROT_EXEC): Operation not permitted" in message
    assert f"{noexec_paths.driver_root} is mounted noexec,nodev (statvfs)" in message
    assert "CAP_SYS_ADMIN" in found[0].fix and "Bidirectional" in found[0].fix
    root = status_json(state, check(state))["driver_root"]
    assert root["flags"] == {"path": str(noexec_paths.driver_root), "noexec": True, "nodev": True}
    assert root["usable"]["ok"] is False and len(root["usable"]["failures"]) == 3
    # The mount is this process's own view (the real tmpfs), not the host view's line.
    assert root["mount"]["source"] == "talos-run" and root["mount"]["ours"] is False
    assert "  usable: NO" in render_text(state, check(state))


def test_an_exec_capable_root_is_clean_whatever_the_host_views_mount_table_says(exec_paths: HostPaths) -> None:
    _publish(exec_paths)
    state = _status(exec_paths)
    assert [f for f in check(state) if f.severity == "error"] == []
    root = status_json(state, check(state))["driver_root"]
    assert root["usable"] == {"ok": True, "failures": []} and root["flags"]["noexec"] is False
    assert "  usable: yes (executed and mapped from it)" in render_text(state, check(state))


def test_init_verify_proves_nothing_before_it_publishes(noexec_paths: HostPaths) -> None:
    _publish(noexec_paths)
    state = check_host(noexec_paths, Settings())  # raises VerificationError on any error finding
    assert state.root.proof is None and state.root.flags is not None


def test_unpublished_root_on_noexec_is_no_error_yet(noexec_paths: HostPaths) -> None:
    state = _status(noexec_paths)
    assert state.root.proof is None
    assert "DRIVER_ROOT_NOT_EXECUTABLE" not in {f.code for f in check(state)}


def test_a_root_without_its_sysfs_or_with_a_procfs_is_a_warning(exec_paths: HostPaths) -> None:
    # driverroot/procsys.py: a read-only sysfs at sys (gpu-operator's validator reads it), no procfs at proc.
    _publish(exec_paths)
    assert not {"DRIVER_ROOT_SYS_MISSING", "DRIVER_ROOT_PROC_MOUNTED"} & {f.code for f in check(_status(exec_paths))}
    (exec_paths.driver_root / "bin").mkdir()
    (exec_paths.driver_root / "bin/sh").write_bytes(b"\x7fELF stand-in for busybox")
    state = _status(exec_paths)  # this machine's own mount table: nothing at the root's proc and sys
    [found] = [f for f in check(state) if f.code.startswith("DRIVER_ROOT_") and "SYS" in f.code]
    assert found.code == "DRIVER_ROOT_SYS_MISSING" and found.severity == "warning"
    assert "validator reads its sys/bus/pci/devices" in found.message and "Bidirectional" in (found.fix or "")
    assert status_json(state, check(state))["driver_root"]["proc_sys"] == {"shell": True, "proc": None, "sys": None}
    assert "  chroot (bin/sh): proc none (the root is data), sys NOT mounted" in render_text(state, check(state))
    root = state.root
    assert root.proc_sys is not None and root.mount is not None
    both = state._replace(root=root._replace(proc_sys=root.proc_sys._replace(proc=root.mount, sys=root.mount)))
    codes = {f.code: f for f in check(both)}
    assert "DRIVER_ROOT_SYS_MISSING" not in codes and codes["DRIVER_ROOT_PROC_MOUNTED"].severity == "warning"
    assert "/proc/sys" in codes["DRIVER_ROOT_PROC_MOUNTED"].message
    assert "umount DRIVER_ROOT/proc" in (codes["DRIVER_ROOT_PROC_MOUNTED"].fix or "")
    assert "  chroot (bin/sh): proc MOUNTED, sys mounted" in render_text(both, check(both))


def test_the_procfs_opt_in_is_a_warning_naming_the_setting_and_others_stay_one(exec_paths: HostPaths) -> None:
    # DRIVER_ROOT_PROCFS=mps-minimal (driverroot/procsys.py PROC_MPS): on the Node while it is on, even before
    # the mount (the Ready report's state is read before it); a procfs of another source stays the alarm.
    _publish(exec_paths)
    (exec_paths.driver_root / "bin").mkdir()
    (exec_paths.driver_root / "bin/sh").write_bytes(b"\x7fELF stand-in for busybox")
    state = _status(exec_paths)._replace(settings=Settings(root_procfs="mps-minimal"))
    root = state.root
    assert root.proc_sys is not None and root.mount is not None
    codes = {f.code: f for f in check(state)}
    assert codes["DRIVER_ROOT_PROCFS_MPS"].severity == "warning" and "DRIVER_ROOT_PROC_MOUNTED" not in codes
    assert "DRIVER_ROOT_PROCFS=mps-minimal" in codes["DRIVER_ROOT_PROCFS_MPS"].message
    assert "subset=pid,hidepid=invisible" in codes["DRIVER_ROOT_PROCFS_MPS"].message
    assert "DRIVER_ROOT_PROCFS=none" in (codes["DRIVER_ROOT_PROCFS_MPS"].fix or "")
    ours = root.mount._replace(source="nvidia-driver-proc-mps", options=("rw", "nosuid"))
    mounted = state._replace(root=root._replace(proc_sys=root.proc_sys._replace(proc=ours, sys=root.mount)))
    codes = {f.code: f for f in check(mounted)}
    assert "DRIVER_ROOT_PROCFS_MPS" in codes and "DRIVER_ROOT_PROC_MOUNTED" not in codes
    text = render_text(mounted, check(mounted))
    assert "  chroot (bin/sh): proc DRIVER_ROOT_PROCFS=mps-minimal (rw,nosuid), sys mounted" in text
    legacy_proc = ours._replace(source="nvidia-driver-proc")
    legacy = mounted._replace(root=root._replace(proc_sys=root.proc_sys._replace(proc=legacy_proc, sys=root.mount)))
    assert {"DRIVER_ROOT_PROCFS_MPS", "DRIVER_ROOT_PROC_MOUNTED"} <= {f.code for f in check(legacy)}
    off = mounted._replace(settings=Settings())  # switched off, not restarted yet: ours is the alarm again
    assert {f.code for f in check(off)} & {"DRIVER_ROOT_PROCFS_MPS", "DRIVER_ROOT_PROC_MOUNTED"} == {
        "DRIVER_ROOT_PROC_MOUNTED"
    }
