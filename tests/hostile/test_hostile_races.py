"""Races against the writes and opens below DRIVER_ROOT and SYSFS_ROOT: another process that can write
there (any pod with the driver root mounted read-write) swaps a symlink in between a path's check and its
use. Nothing outside the roots may change, whatever the timing (driver_container/base/beneath.py, node/devices.py).

The racing side is a separate process (its own interpreter: no GIL shared with the code under test), told to
stop by SIGTERM; it prints how often it swapped something in, and each race test checks that it did (a race
that never landed proves nothing). The deterministic tests build the swapped state directly.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers.mounts import tmpfs
from helpers.support import require

from driver_container.base.beneath import open_beneath
from driver_container.base.errors import HostReadError, PublishError
from driver_container.base.paths import HostPaths
from driver_container.base.resolver import Root
from driver_container.node.devices import DeviceNode, create_device_nodes
from driver_container.node.firmware import FirmwarePathResult, set_firmware_search_path
from driver_container.publish.rootdir import create_driver_root, prepare_driver_root
from driver_container.runtime.runner import CompletedCommand, Runner

OUTSIDE_TEXT = b"outside the roots: must never change\n"
RACE_SECONDS = 20.0  # each race runs at most this long (it stops earlier once enough swaps landed)

# Renames a symlink to OUTSIDE over every dot-named character device that appears in DIR (the temporary
# name of a node being made), as fast as it can, until SIGTERM; prints how many it replaced.
_NODE_SWAPPER = """
import os, signal, stat, sys
directory, outside = sys.argv[1], sys.argv[2]
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
swapped = 0
print("ready", flush=True)
while not stop:
    for name in os.listdir(dfd):
        if not name.startswith(".") or name.startswith(".swap"):
            continue
        try:
            if not stat.S_ISCHR(os.lstat(name, dir_fd=dfd).st_mode):
                continue
            os.symlink(outside, ".swap", dir_fd=dfd)
            os.rename(".swap", name, src_dir_fd=dfd, dst_dir_fd=dfd)
            swapped += 1
        except OSError:
            pass
print(swapped, flush=True)
"""

# Flips NAME in DIR between the real directory (kept as NAME.d) and a symlink to an outside directory of the
# same shape (kept as NAME.l), through atomic renames, until SIGTERM; prints how many flips it made.
_DIR_FLIPPER = """
import os, signal, sys
directory, name = sys.argv[1], sys.argv[2]
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
flips = 0
print("ready", flush=True)
while not stop:
    for held in (name + ".d", name + ".l"):
        os.rename(held, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        os.rename(name, held, src_dir_fd=dfd, dst_dir_fd=dfd)
        flips += 1
print(flips, flush=True)
"""


@contextmanager
def _racing(code: str, *args: str) -> Iterator[list[int]]:
    """Run a racing process for the block; the list gets its count once it stopped."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    count: list[int] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield count
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    count.append(int(out.strip().splitlines()[-1]))


def _outside_file(tmp_path: Path) -> Path:
    outside = tmp_path / "outside/victim"
    outside.parent.mkdir(parents=True)
    outside.write_bytes(OUTSIDE_TEXT)
    outside.chmod(0o600)
    return outside


def _assert_untouched(outside: Path) -> None:
    st = os.lstat(outside)
    assert stat.S_IMODE(st.st_mode) == 0o600, f"{outside}: mode changed to {stat.S_IMODE(st.st_mode):o}"
    assert outside.read_bytes() == OUTSIDE_TEXT, f"{outside}: content changed"


@pytest.mark.root
@pytest.mark.timeout(120)
def test_a_symlink_renamed_over_a_node_being_made_never_reaches_outside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """mknod(tmp), chmod(tmp), rename(tmp, target) by path let the swapper chmod a host file 0666 and make
    dev/nvidiactl a link to it. Every step now goes through the dev directory's descriptor and none
    follows a link: the outside file keeps its mode and content, and after every round dev/nvidiactl is
    the node or absent (a refusal naming the other writer), never what the swapper renamed in."""
    require(os.geteuid() == 0, "root (CAP_MKNOD) to create device nodes", how="run the tests as root")
    caplog.set_level(logging.ERROR, logger="driver_container.node.devices")  # a warning for each swap it meets
    outside = _outside_file(tmp_path)
    driver_root = tmp_path / "run/driver"
    (driver_root / "dev").mkdir(parents=True)
    node = DeviceNode("nvidiactl", 195, 255)
    target = driver_root / "dev/nvidiactl"
    rounds = refused = 0
    old_umask = os.umask(0o077)  # mknod's mode then differs from the node's: the chmod step runs every time
    try:
        with _racing(_NODE_SWAPPER, str(driver_root / "dev"), str(outside)) as swapped:
            deadline = time.monotonic() + RACE_SECONDS
            while time.monotonic() < deadline and rounds < 3000:
                rounds += 1
                if os.path.lexists(target):
                    target.unlink()
                try:
                    create_device_nodes(driver_root, (node,))
                except PublishError as exc:
                    assert "replaced by another process" in exc.message, exc.message
                    refused += 1
                _assert_untouched(outside)
                st = os.lstat(target) if os.path.lexists(target) else None
                assert st is None or (stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(195, 255)), (
                    f"round {rounds}: dev/nvidiactl is {stat.filemode(st.st_mode)}"
                )
    finally:
        os.umask(old_umask)
    assert swapped[0] > 0, f"the swapper never replaced a node in {rounds} rounds: the race was not run"
    report = create_device_nodes(driver_root, (node,))  # alone again: made as usual
    st = os.lstat(target)
    assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666, report
    print(f"{rounds} rounds, {swapped[0]} swaps landed, {refused} refused")


@pytest.mark.timeout(120)
def test_a_sysfs_directory_flipped_to_a_link_is_never_written_through(tmp_path: Path) -> None:
    """The firmware search path was resolved, read, resolved again and opened by path: a directory flipped
    to a link in between was followed, and the write landed in the link's target. Now it is opened from
    SYSFS_ROOT with no link at any component: only the real parameter is ever written."""
    sysfs = tmp_path / "sys"
    module = sysfs / "module"
    (module / "firmware_class.d/parameters").mkdir(parents=True)
    real_param = module / "firmware_class.d/parameters/path"
    real_param.write_bytes(b"")
    outside_dir = tmp_path / "outside/firmware_class"
    (outside_dir / "parameters").mkdir(parents=True)
    outside = outside_dir / "parameters/path"
    outside.write_bytes(b"")  # empty, like the real one: a read through the link sees nothing odd
    outside.chmod(0o600)
    (module / "firmware_class.l").symlink_to(outside_dir)
    paths = HostPaths(sysfs_root=sysfs, run_dir=tmp_path / "run")
    results: dict[FirmwarePathResult, int] = {}
    reset = os.open(real_param, os.O_WRONLY)  # the real file whatever its name is at the moment
    try:
        with _racing(_DIR_FLIPPER, str(module), "firmware_class") as flips:
            deadline = time.monotonic() + RACE_SECONDS
            while time.monotonic() < deadline and sum(results.values()) < 5000:
                os.ftruncate(reset, 0)
                result = set_firmware_search_path(paths.host_driver_root, paths.sys).result
                results[result] = results.get(result, 0) + 1
                assert outside.read_bytes() == b"", f"written through the link: {outside.read_bytes()!r}"
    finally:
        os.close(reset)
    assert flips[0] > 100, "the flipper hardly ran: the race was not run"
    assert results.get(FirmwarePathResult.SET, 0) > 0, results  # the real parameter was reached and written
    assert stat.S_IMODE(os.lstat(outside).st_mode) == 0o600
    print(f"{flips[0]} flips, results {results}")


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    """root/a/b/file and, outside, the same shape with other content."""
    root = tmp_path / "root"
    (root / "a/b").mkdir(parents=True)
    (root / "a/b/file").write_bytes(b"inside\n")
    other = tmp_path / "other"
    (other / "b").mkdir(parents=True)
    (other / "b/file").write_bytes(OUTSIDE_TEXT)
    return root, other


@pytest.mark.parametrize("openat2", [False, True], ids=["walk", "openat2"])
def test_open_beneath_refuses_a_link_at_every_component(tmp_path: Path, openat2: bool) -> None:
    """Both implementations answer alike: the file itself, ELOOP for a link as any component (a relative
    one that stays inside too), ENOENT, ENOTDIR, EXDEV for '..'."""
    root, other = _tree(tmp_path)
    fd = open_beneath(root, "a/b/file", os.O_RDONLY, openat2=openat2)
    assert os.read(fd, 100) == b"inside\n"
    os.close(fd)
    (root / "a/b/last").symlink_to("file")
    (root / "inner").symlink_to("a")
    (root / "out").symlink_to(other)
    for inner in ("a/b/last", "inner/b/file", "out/b/file"):
        with pytest.raises(OSError) as caught:
            open_beneath(root, inner, os.O_RDONLY, openat2=openat2)
        assert caught.value.errno == errno.ELOOP, inner
    for inner, code in (("a/missing", errno.ENOENT), ("a/b/file/x", errno.ENOTDIR), ("a/../a/b/file", errno.EXDEV)):
        with pytest.raises(OSError) as caught:
            open_beneath(root, inner, os.O_RDONLY, openat2=openat2)
        assert caught.value.errno == code, inner
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:  # from a descriptor, and the root itself
        os.close(open_beneath(root_fd, "a/b", os.O_RDONLY | os.O_DIRECTORY, openat2=openat2))
        os.close(open_beneath(root_fd, "", os.O_RDONLY | os.O_DIRECTORY, openat2=openat2))
    finally:
        os.close(root_fd)


def test_a_directory_swapped_for_a_link_after_resolving_is_not_read_through(tmp_path: Path) -> None:
    """Root.resolve checks each component, then the open went by the full path: a directory swapped for a
    link in between was followed out of the root. A snapshot root remembers its lstat answers, which
    freezes "resolved, not yet opened" without any timing; the read must refuse, never return the outside
    file's bytes, and the listing must not list the outside directory."""
    root, other = _tree(tmp_path)
    snap = Root(root).snapshot()
    assert snap.read_bytes("a/b/file") == b"inside\n"  # resolved: "a" and "a/b" remembered as directories
    assert snap.listdir("a/b") == ["file"]
    (root / "a").rename(tmp_path / "moved")
    (root / "a").symlink_to(other)  # now a/b/file is other/b/file
    with pytest.raises(HostReadError) as caught:
        snap.read_bytes("a/b/file")
    assert "symlink" in caught.value.message, caught.value.message
    with pytest.raises(HostReadError):
        snap.listdir("a/b")
    assert Root(root).read_text_or_none("a/b/file") is None  # a fresh root resolves the link inside the root


class SwappingMountRunner(Runner):
    """mount(8) as a racer meets it: DRIVER_ROOT, checked a moment ago, is now a link to ``outside`` (the real
    directory renamed aside). Records where the mount would land: the kernel's answer for the target given."""

    def __init__(self, driver_root: Path, outside: Path) -> None:
        super().__init__()
        self.driver_root, self.outside = driver_root, outside
        self.landed: list[str] = []

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float = 120.0,
        check: bool = True,
        stdin: str | None = None,
        cwd: str | None = None,
    ) -> CompletedCommand:
        point = self.driver_root
        if point.is_dir() and not point.is_symlink():
            point.rename(point.with_name("driver.moved"))
            point.symlink_to(self.outside)
        target = argv[-1]
        if cwd is not None:  # relative to the working directory the child would enter (a descriptor of ours)
            base = os.readlink(f"/proc/self/fd/{cwd.rsplit('/', 1)[1]}")
            target = os.path.join(base, target)
        self.landed.append(os.path.realpath(target))
        return CompletedCommand(tuple(argv), 0, "", "")


def test_a_link_renamed_over_driver_root_is_not_mounted_through(tmp_path: Path) -> None:
    """DRIVER_ROOT was checked, then mount(8) was given its path: a link renamed over it in between (mount(8)
    takes milliseconds to start) put init's tmpfs onto the link's target outside RUN_DIR. Now mount(8) mounts
    on the directory that was opened: the renamed one, still inside RUN_DIR (driverroot/rootpath.py)."""
    with tmpfs(tmp_path / "talos") as talos:  # noexec, shared: statvfs asks for the tmpfs
        paths = HostPaths(run_dir=talos / "nvidia", own_procfs_root=tmp_path / "own-proc")
        (tmp_path / "own-proc/self").mkdir(parents=True)
        (tmp_path / "own-proc/self/fd").symlink_to("/proc/self/fd")  # this process's descriptors, for real
        (tmp_path / "own-proc/self/mountinfo").write_text(
            f"30 1 0:26 / {talos} rw,nosuid,nodev,noexec shared:18 - tmpfs talos-run rw\n"
        )
        outside = talos / "outside"
        outside.mkdir()
        create_driver_root(paths.driver_root, paths.run_dir)
        runner = SwappingMountRunner(paths.driver_root, outside)
        prepare_driver_root(paths, runner)
        assert paths.driver_root.is_symlink(), "the swap did not happen: the race was not run"
        assert runner.landed == [str(paths.run_dir / "driver.moved")], runner.landed
