"""The image on a Talos-shaped node whose /run is a tmpfs mounted ``noexec,nosuid,nodev`` and shared
(siderolabs/talos internal/pkg/mount/v3/helpers.go ``PseudoLate``, commit ad8823176e75b9cd07647ddde13c34f2ab77c663;
Talos makes it rshared at boot). The driver container gets what gpu-operator's driver DaemonSet gives
``nvidia-driver-ctr`` (NVIDIA/gpu-operator assets/state-driver/0500_daemonset.yaml, commit
a22dbf671f2e26f9a1e342f8eea28e196235e110): /run/nvidia Bidirectional, the host's os-release at
/host-etc/os-release, the firmware search path file, the host's /run/nvidia/driver/lib/firmware at
/lib/firmware, /drivers; and CAP_SYS_ADMIN instead of ``privileged: true`` (which this engine cannot start).

The node's /proc and /sys are the fixture's (PROCFS_ROOT, SYSFS_ROOT), as in the other container tests;
the fixture proc's ``self`` is bound to init's own /proc/<pid> (exec keeps the pid), so init reads the
mounts of its container, as a driver pod reads its own through the host's /proc (hostPID).
Consumers are the host, a container with the root as a plain hostPath, and one with two libraries
bind-mounted read-only as a CDI spec mounts them: all must be able to execute and map what was published.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from container_support import IMAGE_DRIVER_VERSION, Volumes, detached, run_to_end, wait_for_log
from helpers.support import FIXTURES, require
from helpers.trees import pseudo_mounts_below, snapshot

from driver_container.formats.kernel.mountinfo import Mount, parse_mountinfo

pytestmark = pytest.mark.container

HOST = FIXTURES / "hosts" / "talos-1.11-kmod-535"  # the image's own 535.309.01 is what it loaded
READY_LINE = "Done, now waiting for signal"
NO_DRIVER = "couldn't communicate with the NVIDIA driver"
LIBDIR = "usr/lib/x86_64-linux-gnu"
SOURCE = "nvidia-driver-root"
# PROCFS_ROOT is the fixture's host view, without self/ (docs/publish.md): init reads its own mounts from /proc.
ENTRYPOINT = ["sh", "-c", 'exec nvidia-driver "$@"', "sh"]
# nvidia-smi run as root creates /dev/nvidiactl: on the host only in a private mount namespace and /dev.
PRIVATE_DEV = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs private-dev /dev && exec "$@"', "sh"]
CONSUMER = (
    'LD_PRELOAD=/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 /driver/usr/bin/nvidia-smi; echo "preload $?"; '
    'chroot /driver /usr/bin/nvidia-smi; echo "chroot $?"'
)
CDI_LOAD = (
    "import ctypes\nfor n in ('libcuda.so.1', 'libnvidia-ml.so.1'):\n    ctypes.CDLL('/cdi/' + n)\nprint('loaded')"
)


@dataclass(frozen=True)
class TalosNode:
    fixture: Path  # private copy of the host fixture
    run_fs: Path  # stands in for the node's /run

    @property
    def driver_root(self) -> Path:
        return self.run_fs / "nvidia/driver"

    def env(self) -> dict[str, str]:
        env = dict(line.split("=", 1) for line in (self.fixture / "env").read_text().splitlines() if "=" in line)
        return env | {
            "PROCFS_ROOT": "/fixture/proc",
            "SYSFS_ROOT": "/fixture/sys",
            "HOST_DRIVER_ROOT": str(self.driver_root),
            "NVIDIA_PERSISTENCED": "false",  # no GPU here
        }

    def volumes(self) -> Volumes:
        fw_path = "sys/module/firmware_class/parameters/path"
        return {
            str(self.run_fs / "nvidia"): {"bind": "/run/nvidia", "mode": "rw,rshared"},  # Bidirectional
            str(self.fixture / "host/etc/os-release"): {"bind": "/host-etc/os-release"},
            str(self.fixture / fw_path): {"bind": f"/{fw_path}", "mode": "rw"},
            str(self.driver_root / "lib/firmware"): {"bind": "/lib/firmware", "mode": "rw"},
            str(self.fixture / "drivers"): {"bind": "/drivers"},
            str(self.fixture / "proc"): {"bind": "/fixture/proc"},
            str(self.fixture / "sys"): {"bind": "/fixture/sys", "mode": "rw"},
        }


def _host_mounts() -> list[Mount]:
    return parse_mountinfo(Path("/proc/self/mountinfo").read_text())


def _ours(node: TalosNode) -> list[Mount]:
    return [m for m in _host_mounts() if m.mount_point == str(node.driver_root) and m.source == SOURCE]


@pytest.fixture(scope="module")
def node(image: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TalosNode]:
    require(os.geteuid() == 0, "root (mount, chroot)")
    require(shutil.which("unshare"), "unshare (util-linux)")
    base = tmp_path_factory.mktemp("talos-run")
    fixture = Path(shutil.copytree(HOST, base / "host-fixture", symlinks=True))
    assert not (fixture / "proc/self").exists()
    run_fs = base / "run"
    run_fs.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "noexec,nosuid,nodev,mode=0755", "talos-run", str(run_fs)],
            check=True,
            timeout=30,
        )
        subprocess.run(["mount", "--make-shared", str(run_fs)], check=True, timeout=30)
        # The kubelet creates the hostPath directories (type DirectoryOrCreate) before the container starts.
        (run_fs / "nvidia/driver/lib/firmware").mkdir(parents=True)
        yield TalosNode(fixture, run_fs)
    finally:
        subprocess.run(["umount", "-R", str(run_fs)], check=False, timeout=30)
    assert not [m for m in _host_mounts() if m.mount_point.startswith(str(base))], "mounts left behind"


@pytest.fixture(scope="module")
def driver(image: Any, node: TalosNode) -> Iterator[Any]:
    with detached(
        image, ["init"], entrypoint=ENTRYPOINT, env=node.env(), volumes=node.volumes(), cap_add=["SYS_ADMIN"]
    ) as container:
        _wait_ready(container, 1)
        yield container


def _wait_ready(container: Any, count: int, timeout: float = 120) -> str:
    return wait_for_log(container, READY_LINE, count=count, timeout=timeout)


def _host_smi(root: Path, *, chroot: bool) -> subprocess.CompletedProcess[str]:
    preload = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(root / LIBDIR / "libnvidia-ml.so.1")}
    argv = ["chroot", str(root), "/usr/bin/nvidia-smi"] if chroot else [str(root / "usr/bin/nvidia-smi")]
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"} if chroot else preload
    return subprocess.run([*PRIVATE_DEV, *argv], env=env, capture_output=True, text=True, check=False, timeout=60)


def _assert_host_runs_it(node: TalosNode) -> None:
    for chroot in (False, True):
        smi = _host_smi(node.driver_root, chroot=chroot)
        assert smi.returncode == 9, f"chroot={chroot}: {smi.stdout}{smi.stderr}"  # 126 on the noexec /run
        assert NO_DRIVER in smi.stdout


def test_without_cap_sys_admin_init_exits_1_before_ready(image: Any, node: TalosNode) -> None:
    # First in this module: the driver fixture's container starts after it, on the same node.
    entrypoint = [*ENTRYPOINT[:2], ENTRYPOINT[2].replace("exec ", "exec setpriv --bounding-set -sys_admin "), "sh"]
    done = run_to_end(
        image, ["init"], entrypoint=entrypoint, env=node.env(), volumes=node.volumes(), cap_add=["SYS_ADMIN"]
    )
    out = done.stdout + done.stderr
    assert done.exit_code == 1, out
    assert "rw,nosuid,nodev,noexec,relatime" in out and "permission denied" in out and "CAP_SYS_ADMIN" in out
    assert READY_LINE not in out
    assert (node.run_fs / "nvidia/validations/.driver-daemons-status").read_text().strip() == "NotReady"
    assert not (node.driver_root / ".driver-container").exists() and _ours(node) == []


def test_the_host_runs_the_published_nvidia_smi(driver: Any, node: TalosNode) -> None:
    _assert_host_runs_it(node)
    [ours] = _ours(node)  # propagated to the host through the rshared /run/nvidia
    assert ours.fstype == "tmpfs" and not ({"noexec", "nodev"} & set(ours.options))
    status = driver.exec_run(["nvidia-driver", "status"])
    out = status.output.decode(errors="replace")
    assert status.exit_code == 0, out
    assert f"mount /run/nvidia/driver tmpfs {SOURCE} rw,nosuid" in out and "DRIVER_ROOT_NOT_EXECUTABLE" not in out
    assert "usable: yes (executed and mapped from it)" in out


def test_the_first_publish_takes_every_digest_from_the_image_index(driver: Any, node: TalosNode) -> None:
    # The image build's index (Dockerfile: nvidia-driver index-userspace) survives the layer export and
    # unpack with sizes and mtimes that still match, so no copied file is hashed (docs/image.md).
    logs = _wait_ready(driver, 1)
    counted = re.search(r"(\d+) of (\d+) files' digests from the image index \((\d+) hashed\)", logs)
    assert counted is not None, logs
    assert counted[1] == counted[2] and int(counted[1]) > 20 and counted[3] == "0", counted[0]
    # The check after Ready (a low-priority child) read every file back and found them as recorded.
    deadline = time.monotonic() + 60
    while "published paths match the manifest" not in logs:
        assert time.monotonic() < deadline, logs
        time.sleep(0.2)
        logs = driver.logs().decode(errors="replace")
    status = driver.exec_run(["nvidia-driver", "status", "--verify"])
    out = status.output.decode(errors="replace")
    assert status.exit_code == 0 and "PUBLISHED_FILES_VERIFIED" in out, out


def test_a_container_with_the_root_as_a_plain_hostpath_runs_it(image: Any, driver: Any, node: TalosNode) -> None:
    # As the validator mounts it (assets/state-operator-validation/0500_daemonset.yaml: hostPath
    # /run/nvidia/driver, read-write, HostToContainer). Its pod is privileged: it may open the NVIDIA
    # character devices (majors from the fixture's proc/devices) in the published dev/; without a driver
    # they answer ENXIO, hence exit 9.
    volumes = {str(node.driver_root): {"bind": "/driver", "mode": "rw,rslave"}}
    done = run_to_end(
        image,
        [CONSUMER],
        entrypoint=["sh", "-c"],
        volumes=volumes,
        device_rules=["c 195:* rwm", "c 509:* rwm"],
        timeout=60,
    )
    assert "preload 9" in done.stdout and "chroot 9" in done.stdout, done.stdout + done.stderr
    assert done.stdout.count(NO_DRIVER) == 2


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_libraries_bind_mounted_as_cdi_does_can_be_loaded(image: Any, driver: Any, node: TalosNode, mode: str) -> None:
    # A CDI spec bind-mounts each library file (options ro, nosuid, nodev, bind): "ro" is that form. This
    # engine's runc (1.1.5) remounts a read-only bind with MS_RDONLY alone, which drops the source's noexec,
    # so "ro" alone could not fail here (newer runc keeps the source's flags, as a real node would); "rw"
    # keeps the source mount's flags, as the kernel copies them, and fails on a plain noexec directory.
    lib = node.driver_root / LIBDIR
    volumes = {
        str(lib / f"{name}.{IMAGE_DRIVER_VERSION}"): {"bind": f"/cdi/{name}.1", "mode": mode}
        for name in ("libcuda.so", "libnvidia-ml.so")
    }
    done = run_to_end(image, [CDI_LOAD], entrypoint=["python3", "-c"], volumes=volumes, timeout=60)
    assert done.exit_code == 0 and "loaded" in done.stdout, done.stdout + done.stderr


def test_restart_and_kill_keep_the_mount_and_rewrite_nothing(driver: Any, node: TalosNode) -> None:
    before = snapshot(node.driver_root, content=False, nlink=False, mtime=True, inode=True)
    assert ".driver-container/manifest.json" in before and f"{LIBDIR}/libcuda.so.{IMAGE_DRIVER_VERSION}" in before
    driver.restart(timeout=10)  # SIGTERM, then the same container starts again
    logs = _wait_ready(driver, 2)
    driver.kill()  # SIGKILL: no cleanup at all, the pid file stays
    driver.wait(timeout=30)
    driver.start()
    logs = _wait_ready(driver, 3)
    # One mount decision per start (publish/rootdir.py: made once and handed to the unchanged check and the
    # publisher): the first start mounted the tmpfs, each restart found it in place.
    assert logs.count("DRIVER_ROOT mount:") == 3, logs
    assert logs.count(f"is already our tmpfs {SOURCE}") == 2, logs
    assert logs.count(f"mounted tmpfs {SOURCE}") == 1, logs
    # Both restarts recognised the root without the publisher (publish/unchanged.py: the image's index).
    assert logs.count("unchanged since its last publish") == 2, logs
    assert len(_ours(node)) == 1
    # The image has a shell, so init mounts a read-only sysfs in its tmpfs and no procfs (driverroot/procsys.py);
    # each restart keeps it, and nothing published changes.
    assert "mounted proc" not in logs and logs.count("mounted sysfs") == 1, logs
    assert pseudo_mounts_below(node.driver_root) == {node.driver_root / "sys"}
    after = snapshot(node.driver_root, content=False, nlink=False, mtime=True, inode=True)
    assert after == before
    _assert_host_runs_it(node)
