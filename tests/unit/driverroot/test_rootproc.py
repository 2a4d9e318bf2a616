"""driverroot/procsys.py: ``init`` mounts a read-only sysfs and no procfs in the published root, and unmounts the
procfs earlier versions mounted there (source nvidia-driver-proc), with which argv; what it keeps on a restart,
what it leaves (someone else's procfs, a planted symlink) and what it does without the mount table or the
privilege. The mount table (OWN_PROCFS_ROOT/self/mountinfo) is a file here; the runner records each argv and
answers as mount(8) would, without mounting anything (tests/integration/test_procsys_real.py mounts for real)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers.mounts import MountRunner

from driver_container.base.errors import PublishError
from driver_container.base.paths import HostPaths
from driver_container.driverroot.procsys import SYS_FIX, ensure_proc_sys, read_root_mounts, why_not
from driver_container.formats.kernel.mountinfo import parse_mountinfo
from driver_container.node.devices import chroot_nodes
from driver_container.settings import ROOT_PROCFS_CHOICES

TALOS_RUN = "30 1 0:26 /nvidia {run} rw,nosuid,nodev,noexec,relatime shared:18 - tmpfs none rw,mode=755\n"
OURS = "40 30 0:52 / {root} rw,nosuid,relatime shared:44 - tmpfs nvidia-driver-root rw,mode=755\n"
PROC = "41 40 0:53 / {root}/proc rw,nosuid,nodev,noexec,relatime shared:45 - proc nvidia-driver-proc rw\n"
# Onto "." as given: mount(8) runs in the mount point, entered through a descriptor of it (MountRunner.dirs).
SYS_ARGV = ["mount", "--no-canonicalize", "-t", "sysfs", "-o", "ro,nosuid,nodev,noexec", "nvidia-driver-sys", "."]
SYS = "42 40 0:21 / {root}/sys ro,nosuid,nodev,noexec,relatime shared:46 - sysfs nvidia-driver-sys rw\n"


def _node(tmp_path: Path, *lines: str, shell: bool = True, mountinfo: bool = True) -> HostPaths:
    """A published root with (or without) its shell and the proc and sys mount points, and a mount table."""
    paths = HostPaths(run_dir=tmp_path / "run", own_procfs_root=tmp_path / "own-proc")
    root = paths.driver_root
    for directory in ("bin", "proc", "sys"):
        (root / directory).mkdir(parents=True)
    if shell:
        (root / "bin/sh").write_bytes(b"\x7fELF stand-in for busybox")
    if mountinfo:
        (tmp_path / "own-proc/self").mkdir(parents=True)
        (tmp_path / "own-proc/self/fd").symlink_to("/proc/self/fd")  # this process's descriptors, for real
        text = "".join(lines).format(run=paths.run_dir, root=root.resolve())
        (tmp_path / "own-proc/self/mountinfo").write_text(text)
    return paths


def _umount_proc(paths: HostPaths) -> list[str]:
    return ["umount", f"{paths.driver_root.resolve()}/proc"]


def test_our_shared_tmpfs_gets_a_read_only_sysfs_and_no_procfs(tmp_path: Path) -> None:
    paths, runner = _node(tmp_path, TALOS_RUN, OURS), MountRunner()
    assert ensure_proc_sys(paths, runner) == 1
    assert runner.argvs == [SYS_ARGV] and runner.dirs == [str(paths.driver_root / "sys")]


def test_the_procfs_earlier_versions_mounted_is_unmounted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths, runner = _node(tmp_path, TALOS_RUN, OURS, PROC, SYS), MountRunner()
    with caplog.at_level(logging.INFO):
        assert ensure_proc_sys(paths, runner) == 0  # the sysfs is kept
    assert runner.argvs == [_umount_proc(paths)]
    assert "the root is published without /proc" in caplog.text


def test_someone_elses_procfs_is_left_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    foreign = PROC.replace("nvidia-driver-proc", "proc")
    paths, runner = _node(tmp_path, TALOS_RUN, OURS, foreign, SYS), MountRunner()
    with caplog.at_level(logging.WARNING):
        assert ensure_proc_sys(paths, runner) == 0
    assert runner.argvs == [] and "is not init's: left mounted" in caplog.text


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        ((TALOS_RUN,), "is not init's own tmpfs nvidia-driver-root (tmpfs none at"),  # RUN_DIR's own filesystem
        ((TALOS_RUN, OURS.replace("nvidia-driver-root", "tmpfs")), "is not init's own tmpfs"),  # someone else's
        ((TALOS_RUN, OURS.replace(" shared:44", "")), "is not shared: a mount made in it would stay"),
        ((), "(no mount in the table)"),
    ],
)
def test_nothing_is_mounted_outside_our_shared_tmpfs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, lines: tuple[str, ...], reason: str
) -> None:
    paths, runner = _node(tmp_path, *lines), MountRunner()
    with caplog.at_level(logging.INFO):
        assert ensure_proc_sys(paths, runner) == 0
    assert runner.argvs == [] and reason in caplog.text
    mounts = parse_mountinfo("".join(lines).format(run=paths.run_dir, root=paths.driver_root.resolve()))
    assert why_not(mounts, str(paths.driver_root.resolve())) is not None


def test_without_a_shell_or_a_mount_table_nothing_is_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    runner = MountRunner()
    assert ensure_proc_sys(_node(tmp_path / "a", TALOS_RUN, OURS, PROC, shell=False), runner) == 0
    paths = _node(tmp_path / "c", TALOS_RUN, OURS, PROC, shell=False)
    (paths.driver_root / "bin/sh").symlink_to("/bin/sh")  # a link is no shell of the root's
    assert ensure_proc_sys(paths, runner) == 0 and runner.argvs == []
    assert chroot_nodes(paths.driver_root) == ()  # the same check as dev/null's (devices.py)
    with caplog.at_level(logging.WARNING):
        assert ensure_proc_sys(_node(tmp_path / "b", mountinfo=False), runner) == 0
    assert runner.argvs == [] and "self/mountinfo does not exist" in caplog.text and SYS_FIX in caplog.text


def test_without_the_privilege_init_warns_and_goes_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths = _node(tmp_path, TALOS_RUN, OURS, PROC)
    runner = MountRunner(32, "mount: /run/nvidia/driver/sys: permission denied.\n")
    with caplog.at_level(logging.WARNING):
        assert ensure_proc_sys(paths, runner) == 0  # no exception
    assert runner.argvs == [_umount_proc(paths), SYS_ARGV]
    assert "exited 32: mount: /run/nvidia/driver/sys: permission denied." in caplog.text and SYS_FIX in caplog.text


def test_a_restart_keeps_the_sysfs(tmp_path: Path) -> None:
    paths, runner = _node(tmp_path, TALOS_RUN, OURS, SYS), MountRunner()
    assert ensure_proc_sys(paths, runner) == 0 and runner.argvs == []


def test_symlinks_planted_at_proc_and_sys_are_never_mounted_or_unmounted_through(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paths, runner = _node(tmp_path, TALOS_RUN, OURS, PROC), MountRunner()
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("proc", "sys"):
        (paths.driver_root / name).rmdir()
        (paths.driver_root / name).symlink_to(outside)
    with caplog.at_level(logging.WARNING):
        assert ensure_proc_sys(paths, runner) == 0
    assert runner.argvs == []
    assert "proc is not a directory of the root (a link or a file?): nothing unmounted" in caplog.text
    assert "sys is not a directory of the root (a link or a file?): nothing mounted there" in caplog.text


def test_status_reads_the_shell_and_both_mounts_from_one_mount_table(tmp_path: Path) -> None:
    paths = _node(tmp_path, TALOS_RUN, OURS, SYS)
    found = read_root_mounts(paths.driver_root, paths.run_dir, paths.own_proc)
    assert found is not None and found.holder is not None and found.holder.source == "nvidia-driver-root"
    assert found.proc_sys.shell and found.proc_sys.proc is None
    assert found.proc_sys.sys is not None and found.proc_sys.sys.has("ro")
    none = _node(tmp_path / "none", mountinfo=False)
    assert read_root_mounts(none.driver_root, none.run_dir, none.own_proc) is None


# DRIVER_ROOT_PROCFS=mps-minimal: the procfs NVIDIA's DRA driver's chrooted MPS server of 550+ needs (docs/mps.md).
MPS_ARGV = [
    "mount",
    "--no-canonicalize",
    "-t",
    "proc",
    "-o",
    "rw,nosuid,nodev,noexec,subset=pid,hidepid=invisible",
    "nvidia-driver-proc-mps",
    ".",
]
PROC_MPS = PROC.replace("nvidia-driver-proc rw", "nvidia-driver-proc-mps rw,hidepid=invisible,subset=pid")


def test_the_opt_in_mounts_the_minimal_procfs_in_the_root(tmp_path: Path) -> None:
    paths, runner = _node(tmp_path, TALOS_RUN, OURS), MountRunner()
    assert ensure_proc_sys(paths, runner, "mps-minimal") == 2
    assert runner.argvs == [SYS_ARGV, MPS_ARGV]
    assert runner.dirs == [str(paths.driver_root / "sys"), str(paths.driver_root / "proc")]


def test_the_opt_in_replaces_the_full_procfs_earlier_versions_mounted(tmp_path: Path) -> None:
    paths, runner = _node(tmp_path, TALOS_RUN, OURS, PROC, SYS), MountRunner()
    assert ensure_proc_sys(paths, runner, "mps-minimal") == 1
    assert runner.argvs == [_umount_proc(paths), MPS_ARGV]


def test_an_unchanged_restart_keeps_the_minimal_procfs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths, runner = _node(tmp_path, TALOS_RUN, OURS, PROC_MPS, SYS), MountRunner()
    with caplog.at_level(logging.INFO):
        assert ensure_proc_sys(paths, runner, "mps-minimal") == 0
    assert runner.argvs == [] and "is mounted already (DRIVER_ROOT_PROCFS=mps-minimal)" in caplog.text


def test_switching_the_opt_in_off_unmounts_ours_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths, runner = _node(tmp_path / "ours", TALOS_RUN, OURS, PROC_MPS, SYS), MountRunner()
    assert ensure_proc_sys(paths, runner) == 0 and runner.argvs == [_umount_proc(paths)]
    foreign = PROC_MPS.replace("nvidia-driver-proc-mps", "proc")  # same options, someone else's
    for procfs in ROOT_PROCFS_CHOICES:
        paths, runner = _node(tmp_path / procfs, TALOS_RUN, OURS, foreign, SYS), MountRunner()
        with caplog.at_level(logging.WARNING):
            assert ensure_proc_sys(paths, runner, procfs) == 0
        assert runner.argvs == [] and "is not init's: left mounted" in caplog.text


def test_a_kernel_without_subset_pid_refuses_the_opt_in(tmp_path: Path) -> None:
    """mount(8)'s answer to EINVAL (util-linux 2.38): no full procfs is mounted in its place."""
    paths = _node(tmp_path, TALOS_RUN, OURS, SYS)
    einval = "mount: /run/nvidia/driver/proc: wrong fs type, bad option, bad superblock on nvidia-driver-proc-mps.\n"
    runner = MountRunner(32, einval)
    with pytest.raises(PublishError) as raised:
        ensure_proc_sys(paths, runner, "mps-minimal")
    assert runner.argvs == [MPS_ARGV]
    assert "DRIVER_ROOT_PROCFS=mps-minimal" in raised.value.message and "exited 32: mount:" in raised.value.message
    assert "Linux 5.8 or later (procfs subset=pid)" in (raised.value.fix or "")


def test_the_opt_in_outside_our_shared_tmpfs_is_refused(tmp_path: Path) -> None:
    paths, runner = _node(tmp_path, TALOS_RUN), MountRunner()
    with pytest.raises(PublishError, match="DRIVER_ROOT_PROCFS=mps-minimal: no procfs mounted in the root"):
        ensure_proc_sys(paths, runner, "mps-minimal")
    assert runner.argvs == []
