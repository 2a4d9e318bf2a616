"""Links never steer a mount (driverroot/rootpath.py): RUN_DIR/driver replaced by a link, a file or a link to a
foreign mount, before the first mount and on the unchanged-root restart path. Nothing is run, nothing outside
the temporary roots changes, and what is refused says why.

The node: a real tmpfs with Talos's /run flags (helpers/mounts.py; statvfs there says noexec, so a mount
would be made), RUN_DIR its nvidia/ directory, ``outside`` a directory of the same tmpfs outside RUN_DIR
(what a link would steer the tmpfs onto), named a mount point by the mount table (a file here) where the
attack needs one. The runner records every argv and mounts nothing (helpers/mounts.py ``MountRunner``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.mounts import MountRunner, tmpfs

from driver_container.base.errors import PublishError
from driver_container.base.paths import HostPaths
from driver_container.driverroot.mount import mount_argv
from driver_container.publish.publisher import publish_driver_root
from driver_container.publish.rootdir import create_driver_root, prepare_driver_root, prepare_existing_root
from driver_container.publish.unchanged import keep_unchanged_root

VERSION = "595.91.07"
ROOT = "1021 985 0:301 / / rw,relatime master:412 - overlay overlay rw\n"
TALOS_RUN = "1030 1021 0:26 / {talos} rw,nosuid,nodev,noexec,relatime shared:18 - tmpfs talos-run rw,mode=755\n"
OURS = "1040 1030 0:52 / {point} rw,nosuid,relatime shared:44 - tmpfs nvidia-driver-root rw,mode=755\n"
FOREIGN = "1050 1030 0:60 / {outside} rw,relatime shared:50 - ext4 /dev/sda1 rw\n"  # the node's, say


@dataclass(frozen=True)
class Node:
    paths: HostPaths
    outside: Path

    def mountinfo(self, *lines: str) -> None:
        talos = self.paths.run_dir.parent
        text = "".join(lines).format(talos=talos, outside=self.outside, point=self.paths.driver_root)
        (self.paths.own_procfs_root / "self/mountinfo").write_text(text)

    def outside_listing(self) -> list[tuple[str, int]]:
        return sorted((e.name, e.stat(follow_symlinks=False).st_mtime_ns) for e in os.scandir(self.outside))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with tmpfs(tmp_path / "talos") as talos:
        (tmp_path / "proc/self").mkdir(parents=True)
        (tmp_path / "proc/self/fd").symlink_to("/proc/self/fd")  # this process's descriptors, for real
        paths = HostPaths(
            own_procfs_root=tmp_path / "proc",
            procfs_root=tmp_path / "host-proc",
            run_dir=talos / "nvidia",
            userspace_root=tmp_path / "userspace",
        )
        paths.run_dir.mkdir()
        outside = talos / "outside"
        outside.mkdir()
        (outside / "node-data").write_text("not init's\n")
        yield Node(paths, outside)


def _link_driver_root(node: Node) -> None:
    node.paths.driver_root.symlink_to(node.outside)


def _unchanged(node: Node, before: list[tuple[str, int]]) -> None:
    assert node.outside_listing() == before
    assert (node.outside / "node-data").read_text() == "not init's\n"


@pytest.mark.parametrize("table", [(ROOT, TALOS_RUN), (ROOT, TALOS_RUN, FOREIGN), (ROOT, TALOS_RUN, OURS)])
def test_a_link_at_driver_root_is_refused_before_the_first_mount(node: Node, table: tuple[str, ...]) -> None:
    # Main followed it: the tmpfs mounted over `outside` (or `umount -R outside` first, where that is a mount).
    node.mountinfo(*table)
    _link_driver_root(node)
    before, runner = node.outside_listing(), MountRunner()
    with pytest.raises(PublishError) as info:
        publish_driver_root(node.paths, VERSION, runner, check_unchanged=False)
    assert runner.argvs == []
    assert "driver: is a symlink" in info.value.message
    assert "nothing is mounted or unmounted through it" in info.value.message and "remove it" in (info.value.fix or "")
    _unchanged(node, before)
    assert node.paths.driver_root.is_symlink()  # not ours: refused, never replaced


@pytest.mark.parametrize("table", [(ROOT, TALOS_RUN, FOREIGN), (ROOT, TALOS_RUN)])
def test_a_link_at_driver_root_on_the_unchanged_restart_path_runs_nothing(node: Node, table: tuple[str, ...]) -> None:
    # Main: `umount -R <outside>` (a mount outside its roots), then its tmpfs mounted there.
    node.mountinfo(*table)
    _link_driver_root(node)
    before, runner = node.outside_listing(), MountRunner()
    changed = prepare_existing_root(node.paths, runner)  # the unchanged restart's mount decision
    assert changed is None and keep_unchanged_root(node.paths, VERSION, changed) is None  # the full path refuses
    assert runner.argvs == []
    _unchanged(node, before)


def test_a_file_at_driver_root_is_refused(node: Node) -> None:
    # Held on main too (its create_driver_root named the file): kept as the third case of the same check.
    node.mountinfo(ROOT, TALOS_RUN)
    node.paths.driver_root.write_text("a file\n")
    runner = MountRunner()
    changed = prepare_existing_root(node.paths, runner)
    assert changed is None and keep_unchanged_root(node.paths, VERSION, changed) is None
    with pytest.raises(PublishError, match=r"driver.* not a directory"):
        publish_driver_root(node.paths, VERSION, runner, check_unchanged=False)
    assert runner.argvs == [] and node.paths.driver_root.read_text() == "a file\n"


def test_prepare_refuses_a_link_swapped_in_after_the_root_was_made(node: Node) -> None:
    node.mountinfo(ROOT, TALOS_RUN, FOREIGN)
    create_driver_root(node.paths.driver_root, node.paths.run_dir)
    node.paths.driver_root.rmdir()
    _link_driver_root(node)
    runner = MountRunner()
    with pytest.raises(PublishError, match="is a symlink"):
        prepare_driver_root(node.paths, runner)
    assert runner.argvs == []


def test_the_real_directory_gets_the_tmpfs_through_its_descriptor(node: Node) -> None:
    node.mountinfo(ROOT, TALOS_RUN)
    create_driver_root(node.paths.driver_root, node.paths.run_dir)
    runner = MountRunner()
    assert prepare_driver_root(node.paths, runner) is True
    assert runner.argvs == [mount_argv()] and runner.dirs == [str(node.paths.driver_root)]


def test_a_link_below_run_dir_on_the_way_to_driver_root_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    paths = HostPaths(
        run_dir=tmp_path / "run", driver_root_override=tmp_path / "run/sub/driver", userspace_root=tmp_path / "u"
    )
    paths.run_dir.mkdir()
    (paths.run_dir / "sub").symlink_to(outside)
    runner = MountRunner()
    with pytest.raises(PublishError) as info:
        publish_driver_root(paths, VERSION, runner, check_unchanged=False)
    assert list(outside.iterdir()) == []  # main made outside/driver, and its journal there
    assert "sub: is a symlink" in info.value.message and runner.argvs == []
