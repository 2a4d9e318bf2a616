"""`nvidia-driver init --no-wait` on every real Debian NVIDIA userspace with the graphics packages (docs/publish.md).

Each userspace is unpacked from Debian's archive by scripts/make-nvidia-debs-userspace.sh (compute, GLX,
EGL, EGL-wayland/gbm, Vulkan ICD, VDPAU, PKCS#11 and nvidia-settings' GTK3 library WITHOUT libgtk-3). The
host is the Talos 1.11 kmod fixture (tests/fixtures/hosts/talos-1.11-kmod-535) re-stamped with the
userspace's version (and, for arm64, the aarch64 ELF machine), in a temporary copy. Without a GPU a usable
root makes nvidia-smi exit 9 with "couldn't communicate with the NVIDIA driver"; a loader error is 127.
arm64 binaries run through qemu-aarch64-static (no binfmt_misc here), also for the image's ldconfig.
The publish (tests/helpers/published_roots.py) is shared, through tests/integration/conftest.py, with
test_toolkit_real.py, where NVIDIA's real container toolkit reads each published root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.fakes import node_env
from helpers.nvidia_sandbox import run_nvidia
from helpers.published_roots import CLI, GRAPHICS, HOST_VERSION, QEMU, Published, Userspace, restamp_host
from helpers.support import ARTEFACTS, REPO, require

MESSAGE = "couldn't communicate with the NVIDIA driver"

pytestmark = pytest.mark.artefact


@pytest.fixture(scope="module", params=GRAPHICS, ids=[u.name for u in GRAPHICS])
def published(request: pytest.FixtureRequest, published_userspaces: Callable[[Userspace], Published]) -> Published:
    return published_userspaces(request.param)


def nvidia_smi(p: Published, *, preload: bool) -> subprocess.CompletedProcess[str]:
    root = p.driver_root
    lib = root / "usr/lib" / p.userspace.triplet / "libnvidia-ml.so.1"
    if p.userspace.arch == "arm64":
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
    lib = published.driver_root / "usr/lib" / published.userspace.triplet
    v = published.userspace.version
    for name in (f"libGLX_nvidia.so.{v}", f"libEGL_nvidia.so.{v}", "libnvidia-egl-wayland.so.1"):
        assert (lib / name).exists(), name
    gtk = next(iter(sorted(published.source.glob(f"usr/lib/libnvidia-gtk3.so.{v}"))), None)
    if gtk is not None:  # nvidia-settings of this version ships it; libgtk-3 is deliberately absent
        assert (lib / gtk.name).is_file()
        warned = [line for line in published.init.stderr.splitlines() if f"libnvidia-gtk3.so.{v} needs" in line]
        assert len(warned) == 1 and "libgtk-3.so.0" in warned[0] and "WARNING" in warned[0], warned


def test_status_reports_the_published_root(published: Published) -> None:
    manifest = json.loads((published.driver_root / ".driver-container/manifest.json").read_text())
    assert manifest["version"] == published.userspace.version


def test_arm64_userspace_is_refused_for_x86_64_modules(tmp_path: Path) -> None:
    userspace = ARTEFACTS / "debian-nvidia-535-arm64"
    require((userspace / ".complete").is_file(), f"Debian NVIDIA 535 arm64 userspace at {userspace}")
    host = restamp_host(tmp_path / "host", HOST_VERSION, "amd64")
    env = node_env(host, userspace, tmp_path / "run", os.environ.get("PATH", "/usr/bin:/bin"))
    done = subprocess.run(
        [str(CLI), "init", "--no-wait"], env=env, capture_output=True, text=True, check=False, timeout=300, cwd=REPO
    )
    assert done.returncode != 0
    assert "ARCH_MISMATCH" in done.stdout + done.stderr or "aarch64" in done.stdout + done.stderr
    assert not (tmp_path / "run/driver/.driver-container/manifest.json").exists()
