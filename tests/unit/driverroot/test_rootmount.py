"""driverroot/mount.py and publish/rootdir.prepare_driver_root: which mount DRIVER_ROOT gets, with what argv,
and what happens without the privilege to mount; driver-manager and status on the same mounts.

Whether a mount is needed is statvfs's answer (docs/publish.md): the tests that need one run on a real tmpfs
with Talos's /run flags (helpers/mounts.py); the mount table (OWN_PROCFS_ROOT/self/mountinfo) is a file
here, so it can be absent, unreadable or lie."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.mounts import tmpfs

from driver_container.base.errors import PublishError
from driver_container.base.paths import HostPaths
from driver_container.driverroot.mount import MOUNT_SOURCE, RootFlags, decide, leftovers_at, mount_argv
from driver_container.formats.kernel.mountinfo import Mount, parse_mountinfo
from driver_container.inspect.hoststate import inspect_host
from driver_container.manager.facts import NodeFacts, leftover_mounts
from driver_container.manager.manager import clean_leftovers
from driver_container.publish.rootdir import create_driver_root, prepare_driver_root
from driver_container.runtime.runner import Runner
from driver_container.settings import Settings

# The driver pod's view on a Talos node (see tests/unit/formats/kernel/test_mountinfo.py for the sources).
ROOT = "1021 985 0:301 / / rw,relatime master:412 - overlay overlay rw\n"
TALOS_RUN = "1030 1021 0:26 /nvidia {run} rw,nosuid,nodev,noexec,relatime shared:18 - tmpfs none rw,mode=755\n"
OURS = "1040 1030 0:52 / {run}/driver rw,nosuid,relatime shared:44 - tmpfs nvidia-driver-root rw,mode=755\n"
NVIDIA_RBIND = "1041 {parent} 0:301 / {run}/driver rw,relatime shared:412 - overlay overlay rw\n"
NVIDIA_SUB = "1042 1041 0:305 / {run}/driver/proc rw,nosuid,nodev,noexec - proc proc rw\n"


def _mounts(text: str, run: str = "/run/nvidia") -> list[Mount]:
    return parse_mountinfo(text.format(run=run, parent=1030))


NOEXEC = RootFlags("/run/nvidia", noexec=True, nodev=True)
EXEC = RootFlags("/run/nvidia", noexec=False, nodev=False)


@pytest.mark.parametrize(
    ("flags", "action"),
    [
        (NOEXEC, "mount"),  # Talos /run: noexec and nodev
        (NOEXEC._replace(nodev=False), "mount"),
        (NOEXEC._replace(noexec=False), "mount"),  # device nodes in the root unusable
        (EXEC, "none"),  # nosuid is fine
    ],
)
def test_decision_from_statvfs_whatever_the_mount_table_says(flags: RootFlags, action: str) -> None:
    for run_line in (TALOS_RUN, TALOS_RUN.replace("nosuid,nodev,noexec", "nosuid")):  # the truth, and a lie
        decision = decide(flags, _mounts(ROOT + run_line), "/run/nvidia/driver")
        assert decision.action == action
        assert decision.holder is not None and decision.holder.mount_point == "/run/nvidia"
    assert decide(flags, None, "/run/nvidia/driver").action == action  # no mount table at all
    assert decide(flags, None, "/run/nvidia/driver").holder is None


def test_our_mount_is_kept_and_is_no_leftover() -> None:
    mounts = _mounts(ROOT + TALOS_RUN + OURS)
    assert decide(EXEC, mounts, "/run/nvidia/driver").action == "keep"
    assert decide(NOEXEC, mounts, "/run/nvidia/driver").action == "keep"  # remounted noexec: the proof says so
    assert leftovers_at(mounts, "/run/nvidia/driver") == []


def test_a_tmpfs_of_someone_else_at_driver_root_is_a_leftover() -> None:
    foreign = OURS.replace(MOUNT_SOURCE, "tmpfs")
    assert [m.mount_id for m in leftovers_at(_mounts(ROOT + TALOS_RUN + foreign), "/run/nvidia/driver")] == [1040]


def test_nvidia_rbind_on_top_of_ours_is_the_only_leftover() -> None:
    mounts = parse_mountinfo((ROOT + TALOS_RUN + OURS + NVIDIA_RBIND + NVIDIA_SUB).format(run="/r", parent=1040))
    assert [m.mount_id for m in leftovers_at(mounts, "/r/driver")] == [1041]
    assert decide(EXEC, mounts, "/r/driver").action == "none"  # the rbind (exec-capable) shows until removed
    assert decide(EXEC, [m for m in mounts if m.mount_id != 1041], "/r/driver").action == "keep"


def test_mount_argv_is_a_tmpfs_with_our_source_exec_and_dev_allowed() -> None:
    assert mount_argv() == [
        "mount",
        "--no-canonicalize",
        "-t",
        "tmpfs",
        "-o",
        "mode=0755,nosuid",
        "nvidia-driver-root",
        ".",
    ]


# -- through prepare_driver_root, with recording mount/umount -------------------------------------


@dataclass(frozen=True)
class Node:
    paths: HostPaths
    runner: Runner
    calls: Path

    @property
    def run(self) -> str:
        return str(self.paths.run_dir)

    def write_mountinfo(self, text: str, parent: int = 1030) -> None:
        (self.paths.own_procfs_root / "self/mountinfo").write_text(text.format(run=self.run, parent=parent))

    def mounted(self) -> list[str]:
        """Our tmpfs mounted, as recorded: mount(8) run in DRIVER_ROOT itself."""
        return [*mount_argv(), f"@{self.run}/driver"]

    def recorded(self) -> list[list[str]]:
        return [line.split("\t") for line in self.calls.read_text().splitlines()] if self.calls.exists() else []


def _node(tmp_path: Path) -> Node:
    (tmp_path / "proc/self").mkdir(parents=True)
    # mount(8) is run in DRIVER_ROOT through OWN_PROCFS_ROOT/self/fd/N: this process's descriptors, for real.
    (tmp_path / "proc/self/fd").symlink_to("/proc/self/fd")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    for tool in ("mount", "umount"):
        # Records argv (tab-separated; mount's then "@" and the real directory it runs in); exits with
        # $FAKE_<TOOL>_RC and prints $FAKE_<TOOL>_ERR.
        var = tool.upper()
        where = '; printf "\\t@%s" "$(pwd -P)"' if tool == "mount" else ""
        (bindir / tool).write_text(
            f'#!/bin/sh\n(printf %s {tool}; for a in "$@"; do printf "\\t%s" "$a"; done{where}; echo) >> {calls}\n'
            f'[ -n "$FAKE_{var}_ERR" ] && printf "%s\\n" "$FAKE_{var}_ERR" >&2\nexit "${{FAKE_{var}_RC:-0}}"\n'
        )
        (bindir / tool).chmod(0o755)
    paths = HostPaths(own_procfs_root=tmp_path / "proc", procfs_root=tmp_path / "host-proc", run_dir=tmp_path / "run")
    create_driver_root(paths.driver_root, paths.run_dir)
    return Node(paths, Runner(env={"PATH": f"{bindir}:{os.environ['PATH']}"}), calls)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    """RUN_DIR on a real tmpfs with Talos's /run flags: statvfs says noexec,nodev."""
    with tmpfs(tmp_path / "run"):
        yield _node(tmp_path)


@pytest.fixture
def exec_node(tmp_path: Path) -> Node:
    """RUN_DIR on the test machine's own (exec-capable) filesystem."""
    return _node(tmp_path)


def test_noexec_run_gets_our_tmpfs_before_anything_is_written(node: Node) -> None:
    node.write_mountinfo(ROOT + TALOS_RUN)
    assert prepare_driver_root(node.paths, node.runner) is True
    assert node.recorded() == [node.mounted()]
    assert os.listdir(node.paths.driver_root) == []


def test_restart_finds_our_mount_and_runs_nothing(node: Node) -> None:
    node.write_mountinfo(ROOT + TALOS_RUN + OURS)
    assert prepare_driver_root(node.paths, node.runner) is False
    assert node.recorded() == []


def test_exec_capable_filesystem_needs_no_mount(exec_node: Node) -> None:
    exec_node.write_mountinfo(ROOT + TALOS_RUN)  # a mount table that lies: statvfs decides
    assert prepare_driver_root(exec_node.paths, exec_node.runner) is False
    assert exec_node.recorded() == []


def test_a_mount_table_calling_run_exec_capable_is_overruled_by_statvfs(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    node.write_mountinfo(ROOT + TALOS_RUN.replace("nosuid,nodev,noexec", "nosuid"))
    assert prepare_driver_root(node.paths, node.runner) is True
    assert node.recorded() == [node.mounted()]
    assert "statvfs, which exec and mmap obey, decides" in caplog.text


def test_the_host_views_mountinfo_is_not_read(node: Node) -> None:
    node.write_mountinfo(ROOT + TALOS_RUN)
    (node.paths.procfs_root / "self").mkdir(parents=True)  # PROCFS_ROOT: a host view saying "ours is there"
    (node.paths.procfs_root / "self/mountinfo").write_text((ROOT + TALOS_RUN + OURS).format(run=node.run))
    assert prepare_driver_root(node.paths, node.runner) is True
    assert node.recorded() == [node.mounted()]


def test_nvidia_rbind_leftover_is_unmounted_then_ours_mounted(node: Node) -> None:
    node.write_mountinfo(ROOT + TALOS_RUN + NVIDIA_RBIND + NVIDIA_SUB)
    assert prepare_driver_root(node.paths, node.runner) is True
    assert node.recorded() == [["umount", "-R", f"{node.run}/driver"], node.mounted()]


def test_leftover_on_top_of_ours_is_unmounted_and_ours_kept(node: Node) -> None:
    node.write_mountinfo(ROOT + TALOS_RUN + OURS + NVIDIA_RBIND + NVIDIA_SUB, parent=1040)
    assert prepare_driver_root(node.paths, node.runner) is True  # the content changed: ours shows again
    assert node.recorded() == [["umount", "-R", f"{node.run}/driver"]]


def test_eperm_names_the_flags_and_the_fix(node: Node) -> None:
    node.write_mountinfo(ROOT + TALOS_RUN)
    # util-linux's words without CAP_SYS_ADMIN (checked in a container): the reason, then a dmesg hint.
    err = "mount: x: permission denied.\n       dmesg(1) may have more information after failed mount system call."
    runner = Runner(env=node.runner.env | {"FAKE_MOUNT_RC": "32", "FAKE_MOUNT_ERR": err})
    with pytest.raises(PublishError) as info:
        prepare_driver_root(node.paths, runner)
    message, fix = info.value.message, info.value.fix or ""
    assert "mounted noexec,nodev (statvfs)" in message and "noexec/nodev would stop consumers" in message
    assert "tmpfs none at " in message  # the holder the mount table names
    assert "exited 32: mount: x: permission denied." in message
    assert "CAP_SYS_ADMIN" in fix and "privileged" in fix and "0500_daemonset.yaml" in fix
    assert node.recorded() == [node.mounted()]


def test_unshared_run_dir_is_refused_before_mounting(node: Node) -> None:
    node.write_mountinfo(ROOT + TALOS_RUN.replace(" shared:18", ""))
    with pytest.raises(PublishError, match="not a shared mount") as info:
        prepare_driver_root(node.paths, node.runner)
    assert "Bidirectional" in (info.value.fix or "")
    assert node.recorded() == []


def test_without_our_mountinfo_an_exec_capable_root_needs_nothing(exec_node: Node) -> None:
    assert prepare_driver_root(exec_node.paths, exec_node.runner) is False
    assert exec_node.recorded() == []


def test_without_our_mountinfo_a_noexec_root_is_refused_before_mounting(node: Node) -> None:
    # Mounting blind could leave the tmpfs in this container (a private RUN_DIR): consumers would see noexec.
    with pytest.raises(PublishError, match=r"cannot be told: .*self/mountinfo does not exist") as info:
        prepare_driver_root(node.paths, node.runner)
    assert "noexec,nodev (statvfs)" in info.value.message and "OWN_PROCFS_ROOT" in (info.value.fix or "")
    assert node.recorded() == []


def test_an_unreadable_mountinfo_is_refused_with_its_reason(node: Node) -> None:
    (node.paths.own_procfs_root / "self/mountinfo").mkdir()  # not a regular file
    with pytest.raises(PublishError, match=r"cannot be told: .*not a regular file"):
        prepare_driver_root(node.paths, node.runner)
    assert node.recorded() == []


# -- driver-manager -------------------------------------------------------------------------------


def _facts(node: Node, mounts: tuple[str, ...]) -> NodeFacts:
    """The manager's facts with these leftover mounts; the host part read from an empty tree beside them."""
    tmp = node.paths.own_procfs_root.parent
    empty = HostPaths(
        procfs_root=node.paths.own_procfs_root,
        own_procfs_root=node.paths.own_procfs_root,
        sysfs_root=tmp / "sys",
        host_root=tmp / "host",
        userspace_root=tmp / "userspace",
        drivers_conf_dir=tmp / "drivers",
        run_dir=node.paths.run_dir,
        host_os_release_override=tmp / "os-release",
    )
    return NodeFacts(inspect_host(empty, Settings()), None, None, mounts, pid_file_stale=False)


def test_driver_manager_leaves_our_mount_alone(node: Node) -> None:
    text = (ROOT + TALOS_RUN + OURS).format(run=node.run)
    assert leftover_mounts(text, f"{node.run}/driver") == ()
    assert clean_leftovers(node.paths, _facts(node, leftover_mounts(text, f"{node.run}/driver")), node.runner) == []
    assert node.recorded() == []


def test_driver_manager_still_removes_nvidias_rbind(node: Node) -> None:
    text = (ROOT + TALOS_RUN + NVIDIA_RBIND + NVIDIA_SUB).format(run=node.run, parent=1030)
    found = leftover_mounts(text, f"{node.run}/driver")
    assert found == (f"{node.run}/driver", f"{node.run}/driver/proc")
    assert clean_leftovers(node.paths, _facts(node, found), node.runner) == [f"unmounted {node.paths.driver_root}"]
    assert node.recorded() == [["umount", "-l", "-R", f"{node.run}/driver"]]
