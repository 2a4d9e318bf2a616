"""`init --no-wait` with RUN_DIR on a Talos-like /run: a tmpfs mounted ``noexec,nosuid,nodev`` and shared
(siderolabs/talos internal/pkg/mount/v3/helpers.go ``PseudoLate``), the fixture Talos 1.11 host and
Debian's real 535.309.01 userspace. Without DRIVER_ROOT's own mount the published nvidia-smi fails with
EACCES (issue 13); with it, it reaches the driver check (exit 9).

PROCFS_ROOT is the fixture's, whose ``self`` is bound to this process's /proc/<pid>: the CLI, our child
in the same mount namespace, reads the mounts it really has, as the driver pod reads its own through the
host's /proc (hostPID).
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


def _mount(*argv: str) -> None:
    subprocess.run(["mount", *argv], check=True, capture_output=True, timeout=30)



@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    require((USERSPACE / "usr/bin/nvidia-smi").is_symlink(), f"Debian NVIDIA {V} chroot at {USERSPACE}")
    require(os.geteuid() == 0, "root (mount, chroot, mknod)")
    require(shutil.which("unshare"), "unshare (util-linux)")
    base = tmp_path_factory.mktemp("noexec-run")
    host = Path(shutil.copytree(HOST, base / "host-fixture", symlinks=True))
    (host / "proc/self").mkdir()
    run_fs = base / "run"
    run_fs.mkdir()
    mounted: list[Path] = []
    try:
        _mount("-t", "tmpfs", "-o", "noexec,nosuid,nodev,mode=0755", "talos-run", str(run_fs))
        mounted.append(run_fs)
        _mount("--make-shared", str(run_fs))
        _mount("--bind", f"/proc/{os.getpid()}", str(host / "proc/self"))
        mounted.append(host / "proc/self")
        yield Node(node_env(host, USERSPACE, run_fs / "nvidia"), run_fs)
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", "-R", str(path)], check=False, timeout=30)
    assert not [m for m in _mounts() if m.mount_point.startswith(str(base))], "mounts left behind"


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
