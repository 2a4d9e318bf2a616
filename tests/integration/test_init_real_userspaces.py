"""`nvidia-driver init --no-wait` on every real Debian NVIDIA userspace with the graphics packages (issue 16).

Each userspace is unpacked from Debian's archive by scripts/make-nvidia-debs-userspace.sh (compute, GLX,
EGL, EGL-wayland/gbm, Vulkan ICD, VDPAU, PKCS#11 and nvidia-settings' GTK3 library WITHOUT libgtk-3). The
host is the Talos 1.11 kmod fixture (tests/fixtures/hosts/talos-1.11-kmod-535) re-stamped with the
userspace's version (and, for arm64, the aarch64 ELF machine), in a temporary copy. Without a GPU a usable
root makes nvidia-smi exit 9 with "couldn't communicate with the NVIDIA driver"; a loader error is 127.
arm64 binaries run through qemu-aarch64-static (no binfmt_misc here), also for the image's ldconfig.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.fakes import node_env
from helpers.nvidia_sandbox import run_nvidia
from helpers.support import ARTEFACTS, FIXTURES, REPO, require
from helpers.toolkit_rules import toolkit_problems

HOST = FIXTURES / "hosts" / "talos-1.11-kmod-535"
HOST_VERSION = "535.309.01"
MESSAGE = "couldn't communicate with the NVIDIA driver"
CLI = Path(sys.executable).parent / "nvidia-driver"
QEMU = "qemu-aarch64-static"

pytestmark = pytest.mark.artefact


@dataclass(frozen=True)
class Case:
    name: str  # artefact under ARTEFACTS
    version: str
    arch: str  # Debian architecture

    @property
    def triplet(self) -> str:
        return "aarch64-linux-gnu" if self.arch == "arm64" else "x86_64-linux-gnu"


CASES = [
    Case("debian-nvidia-535-graphics", "535.309.01", "amd64"),
    Case("debian-nvidia-550-graphics", "550.163.01", "amd64"),
    Case("debian-nvidia-555-graphics", "555.58.02", "amd64"),
    Case("debian-nvidia-535-arm64", "535.309.01", "arm64"),
]


def restamp_host(dest: Path, version: str, arch: str) -> Path:
    """A copy of the Talos 535 host whose module files, /proc and /sys say ``version`` (and ``arch``).

    Versions are replaced in place, NUL-padded when shorter, so every .ko keeps its size and layout
    (its signature no longer matches; nothing here checks it against a key)."""
    host = Path(shutil.copytree(HOST, dest, symlinks=True))
    old = HOST_VERSION.encode()
    new = version.encode()
    assert len(new) <= len(old)
    for path in sorted(p for p in host.rglob("*") if p.is_file() and not p.is_symlink()):
        data = path.read_bytes()
        if path.suffix == ".ko":
            data = data.replace(old + b"\0", new + b"\0" * (len(old) - len(new) + 1))
            if arch == "arm64":
                data = data[:18] + (183).to_bytes(2, "little") + data[20:]  # EM_AARCH64
        else:
            data = data.replace(old, new)
            if arch == "arm64" and path.name == "version":
                data = data.replace(b"x86_64", b"aarch64")
        path.write_bytes(data)
    for old_dir in sorted(host.rglob(HOST_VERSION), reverse=True):
        old_dir.rename(old_dir.with_name(version))
    return host



def qemu_ldconfig_shim(base: Path, userspace: Path) -> str:
    """A PATH entry whose ``ldconfig`` runs the arm64 image's static ldconfig under qemu."""
    shim = base / "shim"
    shim.mkdir()
    real = next(p for p in (userspace / "sbin/ldconfig.real", userspace / "sbin/ldconfig") if p.is_file())
    (shim / "ldconfig").write_text(f'#!/bin/sh\nexec {shutil.which(QEMU)} {real} "$@"\n')
    (shim / "ldconfig").chmod(0o755)
    return f"{shim}:{os.environ.get('PATH', '/usr/bin:/bin')}"


@dataclass(frozen=True)
class Published:
    case: Case
    userspace: Path
    driver_root: Path
    init: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module", params=CASES, ids=[c.name for c in CASES])
def published(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Published:
    case: Case = request.param
    userspace = ARTEFACTS / case.name
    require((userspace / ".complete").is_file(), f"Debian NVIDIA {case.version} {case.arch} userspace at {userspace}",
            how=f"scripts/make-nvidia-debs-userspace.sh {case.name} ... (scripts/setup.sh)")  # fmt: skip
    require(os.geteuid() == 0, "root (chroot, unshare)")
    path = os.environ.get("PATH", "/usr/bin:/bin")
    base = tmp_path_factory.mktemp(case.name)
    if case.arch == "arm64":
        require(shutil.which(QEMU), QEMU, how="apt-get install qemu-user-static (scripts/setup.sh)")
        path = qemu_ldconfig_shim(base, userspace)
    host = restamp_host(base / "host", case.version, case.arch)
    env = node_env(host, userspace, base / "run", path)
    done = subprocess.run([str(CLI), "init", "--no-wait"], env=env, capture_output=True, text=True, check=False,
                          timeout=300, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return Published(case, userspace, base / "run" / "driver", done)


def nvidia_smi(p: Published, *, preload: bool) -> subprocess.CompletedProcess[str]:
    root = p.driver_root
    lib = root / "usr/lib" / p.case.triplet / "libnvidia-ml.so.1"
    if p.case.arch == "arm64":
        qemu = root / QEMU
        if not qemu.exists():
            shutil.copy(shutil.which(QEMU) or QEMU, qemu)  # removed by the next publish, a test-only file
        if preload:
            return run_nvidia([str(qemu), "-L", str(root), "-E", f"LD_PRELOAD={lib}", str(root / "usr/bin/nvidia-smi")])
        return run_nvidia(["chroot", str(root), f"/{QEMU}", "/usr/bin/nvidia-smi"])
    if preload:
        return run_nvidia([str(root / "usr/bin/nvidia-smi")], env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(lib)})
    return run_nvidia(["chroot", str(root), "/usr/bin/nvidia-smi"])


def test_chrooted_nvidia_smi_reaches_the_driver_check(published: Published) -> None:
    done = nvidia_smi(published, preload=False)
    assert done.returncode == 9, done.stdout + done.stderr
    assert MESSAGE in done.stdout


def test_validator_style_ld_preload(published: Published) -> None:
    done = nvidia_smi(published, preload=True)
    assert done.returncode == 9, done.stdout + done.stderr
    assert MESSAGE in done.stdout


def test_optional_libraries_are_published_and_their_missing_dependencies_only_warned(published: Published) -> None:
    lib = published.driver_root / "usr/lib" / published.case.triplet
    v = published.case.version
    for name in (f"libGLX_nvidia.so.{v}", f"libEGL_nvidia.so.{v}", "libnvidia-egl-wayland.so.1"):
        assert (lib / name).exists(), name
    gtk = next(iter(sorted(published.userspace.glob(f"usr/lib/libnvidia-gtk3.so.{v}"))), None)
    if gtk is not None:  # nvidia-settings of this version ships it; libgtk-3 is deliberately absent
        assert (lib / gtk.name).is_file()
        warned = [line for line in published.init.stderr.splitlines() if f"libnvidia-gtk3.so.{v} needs" in line]
        assert len(warned) == 1 and "libgtk-3.so.0" in warned[0] and "WARNING" in warned[0], warned


def test_published_root_follows_the_toolkits_rules(published: Published) -> None:
    assert toolkit_problems(published.userspace, published.driver_root, published.case.version) == []


def test_status_reports_the_published_root(published: Published) -> None:
    manifest = json.loads((published.driver_root / ".driver-container/manifest.json").read_text())
    assert manifest["version"] == published.case.version


def test_arm64_userspace_is_refused_for_x86_64_modules(tmp_path: Path) -> None:
    userspace = ARTEFACTS / "debian-nvidia-535-arm64"
    require((userspace / ".complete").is_file(), f"Debian NVIDIA 535 arm64 userspace at {userspace}")
    host = restamp_host(tmp_path / "host", HOST_VERSION, "amd64")
    env = node_env(host, userspace, tmp_path / "run", os.environ.get("PATH", "/usr/bin:/bin"))
    done = subprocess.run([str(CLI), "init", "--no-wait"], env=env, capture_output=True, text=True, check=False,
                          timeout=300, cwd=REPO)  # fmt: skip
    assert done.returncode != 0
    assert "ARCH_MISMATCH" in done.stdout + done.stderr or "aarch64" in done.stdout + done.stderr
    assert not (tmp_path / "run/driver/.driver-container/manifest.json").exists()
