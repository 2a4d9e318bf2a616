"""driverroot/procsys.py: when ``init`` mounts a procfs and a sysfs in the published root, with which argv, what it
keeps or replaces on a restart, and what it does without the mount table, the privilege or a real mount
point (a planted symlink). The mount table (OWN_PROCFS_ROOT/self/mountinfo) is a file here; the runner
records each argv and answers as mount(8) would, without mounting anything (tests/integration/
test_procsys_real.py mounts for real)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers.mounts import MountRunner

from driver_container.driverroot.procsys import PROC_SYS_FIX, ensure_proc_sys, read_root_mounts, why_not
from driver_container.formats.kernel.mountinfo import parse_mountinfo
from driver_container.node.devices import chroot_nodes
from driver_container.paths import HostPaths

TALOS_RUN = "30 1 0:26 /nvidia {run} rw,nosuid,nodev,noexec,relatime shared:18 - tmpfs none rw,mode=755\n"
OURS = "40 30 0:52 / {root} rw,nosuid,relatime shared:44 - tmpfs nvidia-driver-root rw,mode=755\n"
PROC = "41 40 0:53 / {root}/proc rw,nosuid,nodev,noexec,relatime shared:45 - proc nvidia-driver-proc rw\n"
SYS = "42 40 0:21 / {root}/sys ro,nosuid,nodev,noexec,relatime shared:46 - sysfs nvidia-driver-sys rw\n"
# Onto "." as given: mount(8) runs in the mount point, entered through a descriptor of it (MountRunner.dirs).
PROC_ARGV = ["mount", "--no-canonicalize", "-t", "proc", "-o", "nosuid,nodev,noexec", "nvidia-driver-proc", "."]
SYS_ARGV = ["mount", "--no-canonicalize", "-t", "sysfs", "-o", "ro,nosuid,nodev,noexec", "nvidia-driver-sys", "."]


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


def _argv(template: list[str], paths: HostPaths) -> list[str]:
    return [a.format(root=paths.driver_root.resolve()) for a in template]


def test_our_shared_tmpfs_gets_a_procfs_and_a_read_only_sysfs(tmp_path: Path) -> None:
    paths, runner = _node(tmp_path, TALOS_RUN, OURS), MountRunner()
    assert ensure_proc_sys(paths, runner) == 2
    assert runner.argvs == [_argv(PROC_ARGV, paths), _argv(SYS_ARGV, paths)]
    assert runner.dirs == [str(paths.driver_root / "proc"), str(paths.driver_root / "sys")]


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


def test_without_a_shell_nothing_is_mounted(tmp_path: Path) -> None:
    paths, runner = _node(tmp_path, TALOS_RUN, OURS, shell=False), MountRunner()  # our shared tmpfs
    assert ensure_proc_sys(paths, runner) == 0 and runner.argvs == []
    (paths.driver_root / "bin/sh").symlink_to("/bin/sh")  # a link is no shell of the root's
    assert ensure_proc_sys(paths, runner) == 0 and runner.argvs == []
    assert chroot_nodes(paths.driver_root) == ()  # the same check as dev/null's (devices.py)


def test_without_a_mount_table_init_warns_with_the_fix(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths, runner = _node(tmp_path, mountinfo=False), MountRunner()
    with caplog.at_level(logging.WARNING):
        assert ensure_proc_sys(paths, runner) == 0
    assert runner.argvs == [] and "self/mountinfo does not exist" in caplog.text and PROC_SYS_FIX in caplog.text


def test_without_the_privilege_init_warns_and_goes_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths = _node(tmp_path, TALOS_RUN, OURS)
    runner = MountRunner(32, "mount: /run/nvidia/driver/proc: permission denied.\n")
    with caplog.at_level(logging.WARNING):
        assert ensure_proc_sys(paths, runner) == 0  # no exception: MPS through the DRA driver is optional
    assert runner.argvs == [_argv(PROC_ARGV, paths), _argv(SYS_ARGV, paths)]
    assert "exited 32: mount: /run/nvidia/driver/proc: permission denied." in caplog.text
    assert PROC_SYS_FIX in caplog.text


def test_a_restart_keeps_what_is_mounted(tmp_path: Path) -> None:
    paths, runner = _node(tmp_path, TALOS_RUN, OURS, PROC, SYS), MountRunner()
    (paths.driver_root / "proc/self").symlink_to("4242")  # a procfs that shows this process
    assert ensure_proc_sys(paths, runner) == 0 and runner.argvs == []


def test_a_procfs_of_another_pid_namespace_is_replaced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths, runner = _node(tmp_path, TALOS_RUN, OURS, PROC, SYS), MountRunner()  # proc/self does not resolve
    with caplog.at_level(logging.WARNING):
        assert ensure_proc_sys(paths, runner) == 1
    point = f"{paths.driver_root.resolve()}/proc"
    assert runner.argvs == [["umount", point], _argv(PROC_ARGV, paths)]
    assert "does not show this process (another PID namespace): replacing it" in caplog.text


def test_a_symlink_planted_at_proc_is_never_mounted_through(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    paths, runner = _node(tmp_path, TALOS_RUN, OURS), MountRunner()
    outside = tmp_path / "outside"
    outside.mkdir()
    (paths.driver_root / "proc").rmdir()
    (paths.driver_root / "proc").symlink_to(outside)
    with caplog.at_level(logging.WARNING):
        assert ensure_proc_sys(paths, runner) == 1  # sys only
    assert runner.argvs == [_argv(SYS_ARGV, paths)]
    assert "proc is not a directory of the root (a link or a file?): nothing mounted there" in caplog.text


def test_status_reads_the_shell_and_both_mounts_from_one_mount_table(tmp_path: Path) -> None:
    paths = _node(tmp_path, TALOS_RUN, OURS, SYS)
    found = read_root_mounts(paths)
    assert found is not None and found.holder is not None and found.holder.source == "nvidia-driver-root"
    assert found.proc_sys.shell and found.proc_sys.proc is None and found.proc_sys.missing == ("proc",)
    assert found.proc_sys.sys is not None and found.proc_sys.sys.has("ro")
    assert read_root_mounts(_node(tmp_path / "none", mountinfo=False)) is None
