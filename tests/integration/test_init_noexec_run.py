"""`init --no-wait` with RUN_DIR on a Talos-like /run: a tmpfs mounted ``noexec,nosuid,nodev`` and shared
(siderolabs/talos internal/pkg/mount/v3/helpers.go ``PseudoLate``), the fixture Talos 1.11 host and
Debian's real 535.309.01 userspace. Without DRIVER_ROOT's own mount the published nvidia-smi fails with
EACCES (docs/publish.md, DRIVER_ROOT's own mount); with it, it reaches the driver check (exit 9).

PROCFS_ROOT is the fixture's and has no ``self/``, like any host view that lacks it (an earlier
version then mounted nothing: docs/publish.md): the decision comes from statvfs and the CLI's own /proc
(OWN_PROCFS_ROOT). The scenarios
below give init an own mount table that is absent, unreadable or lies, each on a fresh noexec tmpfs:
either our tmpfs is mounted and nvidia-smi exits 9, or init exits 1 before Ready, never Ready with 126.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.fakes import node_env
from helpers.mounts import tmpfs
from helpers.support import ARTEFACTS, FIXTURES, REPO, require

from driver_container.formats.kernel.mountinfo import Mount, parse_mountinfo

V = "535.309.01"
HOST = FIXTURES / "hosts" / "talos-1.11-kmod-535"
USERSPACE = ARTEFACTS / "debian-nvidia-535"
MESSAGE = "couldn't communicate with the NVIDIA driver"
CLI = Path(sys.executable).parent / "nvidia-driver"
# A private mount namespace with its own /dev: nvidia-smi, as root, creates /dev/nvidiactl.
PRIVATE_DEV = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs private-dev /dev && exec "$@"', "sh"]

pytestmark = pytest.mark.artefact


@dataclass(frozen=True)
class Node:
    env: dict[str, str]
    run_fs: Path  # the Talos-like /run

    @property
    def driver_root(self) -> Path:
        return Path(self.env["RUN_DIR"]) / "driver"

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(CLI), *args], env=self.env, capture_output=True, text=True, check=False, timeout=120, cwd=REPO
        )


def _host(base: Path) -> Path:
    require((USERSPACE / "usr/bin/nvidia-smi").is_symlink(), f"Debian NVIDIA {V} chroot at {USERSPACE}")
    require(os.geteuid() == 0, "root (mount, chroot, mknod)")
    require(shutil.which("unshare"), "unshare (util-linux)")
    host = Path(shutil.copytree(HOST, base / "host-fixture", symlinks=True))
    assert not (host / "proc/self").exists()  # the reproduction: a host view without self/mountinfo
    return host


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    base = tmp_path_factory.mktemp("noexec-run")
    host = _host(base)
    with tmpfs(base / "run") as run_fs:
        yield Node(node_env(host, USERSPACE, run_fs / "nvidia"), run_fs)
    assert not [m for m in _mounts() if m.mount_point.startswith(str(base))], "mounts left behind"


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Node]:
    """A node of its own: a fresh Talos-like /run, for a scenario that leaves it in another state."""
    host = _host(tmp_path)
    with tmpfs(tmp_path / "run") as run_fs:
        yield Node(node_env(host, USERSPACE, run_fs / "nvidia"), run_fs)
    assert not [m for m in _mounts() if m.mount_point.startswith(str(tmp_path))], "mounts left behind"


def _mounts() -> list[Mount]:
    return parse_mountinfo(Path("/proc/self/mountinfo").read_text())


def _ours(node: Node) -> list[Mount]:
    return [m for m in _mounts() if m.mount_point == str(node.driver_root) and m.source == "nvidia-driver-root"]


def _smi(node: Node, *, chroot: bool) -> subprocess.CompletedProcess[str]:
    root = node.driver_root
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")}
    argv = ["chroot", str(root), "/usr/bin/nvidia-smi"] if chroot else [str(root / "usr/bin/nvidia-smi")]
    return subprocess.run(
        [*PRIVATE_DEV, *argv], env={} if chroot else env, capture_output=True, text=True, check=False, timeout=60
    )


def test_the_stand_in_run_really_forbids_exec(node: Node) -> None:
    # Without this the test below could not fail: a copied binary on this tmpfs must be refused.
    probe = node.run_fs / "probe-true"
    shutil.copy2("/bin/true", probe)
    try:
        with pytest.raises(PermissionError):
            subprocess.run([str(probe)], check=False, timeout=10)
    finally:
        probe.unlink()


def test_init_mounts_an_exec_capable_tmpfs_and_nvidia_smi_runs(node: Node) -> None:
    done = node.cli("init", "--no-wait")
    assert done.returncode == 0, done.stdout + done.stderr
    for chroot in (False, True):
        smi = _smi(node, chroot=chroot)
        assert smi.returncode == 9, smi.stdout + smi.stderr  # EACCES (126) on the noexec /run itself
        assert MESSAGE in smi.stdout
    assert "mounted tmpfs nvidia-driver-root" in done.stderr
    [ours] = _ours(node)
    assert ours.fstype == "tmpfs" and not ours.has("noexec") and not ours.has("nodev") and ours.shared


def test_status_shows_our_mount_and_no_finding(node: Node) -> None:
    done = node.cli("status", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["findings"] == []
    mount = report["driver_root"]["mount"]
    assert mount["mount_point"] == str(node.driver_root) and mount["ours"] is True and "noexec" not in mount["options"]


def test_second_init_keeps_the_mount_and_rewrites_nothing(node: Node) -> None:
    def snapshot() -> dict[Path, tuple[int, int]]:
        return {p: (p.lstat().st_ino, p.lstat().st_mtime_ns) for p in node.driver_root.rglob("*")}

    before = snapshot()
    done = node.cli("init", "--no-wait")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "mounted tmpfs" not in done.stderr and "is already our tmpfs" in done.stderr
    assert len(_ours(node)) == 1
    assert snapshot() == before


# -- the own mount table absent, unreadable or lying (OWN_PROCFS_ROOT), each on a fresh noexec /run ---


def _own_proc(node: Node, base: Path, mountinfo: str | None, *, unreadable: bool = False) -> None:
    own = base / "own-proc"
    (own / "self").mkdir(parents=True)
    (own / "self/fd").symlink_to("/proc/self/fd")  # mount(8) is run in DRIVER_ROOT through its descriptor
    if unreadable:
        (own / "self/mountinfo").mkdir()  # not a regular file
    elif mountinfo is not None:
        (own / "self/mountinfo").write_text(mountinfo)
    node.env["OWN_PROCFS_ROOT"] = str(own)


def _daemons_status(node: Node) -> str | None:
    status = Path(node.env["RUN_DIR"]) / "validations/.driver-daemons-status"
    return status.read_text() if status.exists() else None


def _real_mountinfo() -> str:
    return Path("/proc/self/mountinfo").read_text()


@pytest.mark.parametrize("unreadable", [False, True], ids=["absent", "unreadable"])
def test_without_our_mount_table_init_exits_1_before_ready(fresh: Node, tmp_path: Path, unreadable: bool) -> None:
    _own_proc(fresh, tmp_path, None, unreadable=unreadable)
    done = fresh.cli("init", "--no-wait")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "whether a tmpfs mounted there would reach the host cannot be told" in done.stderr
    assert ("not a regular file" if unreadable else "self/mountinfo does not exist") in done.stderr
    assert _daemons_status(fresh) == "NotReady" and _ours(fresh) == []


def test_a_mount_table_claiming_our_mount_is_caught_by_the_proof(fresh: Node, tmp_path: Path) -> None:
    run = next(m for m in _mounts() if m.mount_point == str(fresh.run_fs))
    lie = f"99999 {run.mount_id} 0:999 / {fresh.driver_root} rw,nosuid shared:9999 - tmpfs nvidia-driver-root rw\n"
    _own_proc(fresh, tmp_path, _real_mountinfo() + lie)
    done = fresh.cli("init", "--no-wait")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "is already our tmpfs" in done.stderr  # it believed the table, mounted nothing, published...
    assert "cannot be used by its consumers, not Ready" in done.stderr and "Permission denied" in done.stderr
    assert _daemons_status(fresh) == "NotReady" and _ours(fresh) == []
    assert _smi(fresh, chroot=False).returncode == 126  # what Ready would have handed to the validator
    status = fresh.cli("status", "--json")
    assert status.returncode == 1, status.stdout + status.stderr
    [finding] = [f for f in json.loads(status.stdout)["findings"] if f["code"] == "DRIVER_ROOT_NOT_EXECUTABLE"]
    assert "noexec,nodev (statvfs)" in finding["message"] and "Operation not permitted" in finding["message"]


def test_a_mount_table_calling_run_exec_capable_is_overruled_by_statvfs(fresh: Node, tmp_path: Path) -> None:
    lines = [
        line.replace("nosuid,nodev,noexec", "nosuid") if f" {fresh.run_fs} " in line else line
        for line in _real_mountinfo().splitlines(keepends=True)
    ]
    _own_proc(fresh, tmp_path, "".join(lines))
    done = fresh.cli("init", "--no-wait")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "statvfs, which exec and mmap obey, decides" in done.stderr and "mounted tmpfs" in done.stderr
    assert _daemons_status(fresh) == "Ready" and len(_ours(fresh)) == 1
    assert _smi(fresh, chroot=True).returncode == 9


@pytest.mark.parametrize("view", ["unreadable", "lies"])
def test_whatever_the_host_view_says_our_tmpfs_is_mounted(fresh: Node, view: str) -> None:
    # PROCFS_ROOT is a host view: its self/mountinfo, unreadable or claiming our tmpfs is there, is not read.
    own = Path(fresh.env["PROCFS_ROOT"]) / "self"
    own.mkdir()
    if view == "unreadable":
        (own / "mountinfo").mkdir()
    else:
        (own / "mountinfo").write_text(
            f"1 0 0:1 / / rw - ext4 /dev/vda rw\n2 1 0:2 / {fresh.run_fs} rw shared:1 - tmpfs none rw\n"
            f"3 2 0:3 / {fresh.driver_root} rw,nosuid shared:2 - tmpfs nvidia-driver-root rw\n"
        )
    done = fresh.cli("init", "--no-wait")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "mounted tmpfs nvidia-driver-root" in done.stderr and len(_ours(fresh)) == 1
    assert _smi(fresh, chroot=True).returncode == 9
