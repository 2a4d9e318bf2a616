"""Every real NVIDIA userspace the suite publishes, and its publish by ``nvidia-driver init --no-wait``.

The userspaces: Debian's 535.309.01 in a debootstrap chroot (dpkg-installed, binaries reached through
ABSOLUTE /etc/alternatives links), the graphics trees unpacked from Debian's .debs
(scripts/make-nvidia-debs-userspace.sh: 535 amd64 and arm64, 550, 555), and the root of the two test
images (scripts/setup.sh): USERSPACE_SOURCE=debian, USERSPACE_SOURCE=tree, laid out by the Dockerfile from the
``.run``-shaped tree of scripts/make-nvidia-run-tree.sh, and USERSPACE_SOURCE=archive (the release route), laid
out by the archive's MANIFEST from the NVIDIA-layout archive of scripts/make-nvidia-archive.py.
An image root is taken with ``docker export`` of a created (never started) container.

The host is the Talos 1.11 kmod fixture (tests/fixtures/hosts/talos-1.11-kmod-535) re-stamped with the
userspace's version (and, for arm64, the aarch64 ELF machine) in a temporary copy. arm64 binaries run
through qemu-aarch64-static (no binfmt_misc here), also the image's static ldconfig (a PATH shim).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from helpers.fakes import node_env
from helpers.support import ARTEFACTS, FIXTURES, REPO, require

HOST = FIXTURES / "hosts" / "talos-1.11-kmod-535"
HOST_VERSION = "535.309.01"
CLI = Path(sys.executable).parent / "nvidia-driver"
QEMU = "qemu-aarch64-static"
IMAGE_DEBIAN = os.environ.get("IMAGE", "talos-nvidia-driver:535.309.01-debian")
IMAGE_TREE = os.environ.get("IMAGE_TREE", "talos-nvidia-driver:535.309.01-tree")
IMAGE_ARCHIVE = os.environ.get("IMAGE_ARCHIVE", "talos-nvidia-driver:535.309.01-archive")


@dataclass(frozen=True)
class Userspace:
    name: str  # the short name docs/publish.md's tables use
    version: str
    arch: str = "amd64"  # Debian architecture
    artefact: str = ""  # directory under ARTEFACTS, or
    image: str = ""  # a test image whose root is the userspace

    @property
    def triplet(self) -> str:
        return "aarch64-linux-gnu" if self.arch == "arm64" else "x86_64-linux-gnu"


CHROOT_535 = Userspace("535-chroot", "535.309.01", artefact="debian-nvidia-535")
GRAPHICS = (
    Userspace("535-graphics", "535.309.01", artefact="debian-nvidia-535-graphics"),
    Userspace("550-graphics", "550.163.01", artefact="debian-nvidia-550-graphics"),
    Userspace("555-graphics", "555.58.02", artefact="debian-nvidia-555-graphics"),
    Userspace("535-arm64", "535.309.01", "arm64", artefact="debian-nvidia-535-arm64"),
)
IMAGES = (
    Userspace("535-image", "535.309.01", image=IMAGE_DEBIAN),
    Userspace("535-run-tree-image", "535.309.01", image=IMAGE_TREE),
    Userspace("535-archive-image", "535.309.01", image=IMAGE_ARCHIVE),
)
ARCHIVE_IMAGE = IMAGES[-1]
ALL = (CHROOT_535, *GRAPHICS, *IMAGES)


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


def export_image(image: str, dest: Path) -> Path:
    """The root filesystem of ``image`` unpacked at ``dest`` (a created container, never started)."""
    require(shutil.which("docker"), "the docker CLI", how="scripts/setup.sh (docker.io)")
    probe = subprocess.run(
        ["docker", "image", "inspect", image], capture_output=True, text=True, timeout=60, check=False
    )
    require(probe.returncode == 0, f"image {image}", how="scripts/setup.sh builds it (needs a running engine)")
    dest.mkdir(parents=True)
    created = subprocess.run(
        ["docker", "create", image, "true"], capture_output=True, text=True, timeout=60, check=True
    )
    container = created.stdout.strip()
    try:
        with subprocess.Popen(["docker", "export", container], stdout=subprocess.PIPE) as export:
            subprocess.run(["tar", "-x", "-C", str(dest)], stdin=export.stdout, check=True, timeout=300)
        assert export.returncode == 0
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True, timeout=60, check=False)
    return dest


def userspace_root(userspace: Userspace, base: Path) -> Path:
    """Where ``userspace`` is on this machine (an image is exported below ``base``); its real path, as the
    toolkit resolves links and strips the root from what it finds."""
    if userspace.image:
        return export_image(userspace.image, base / "image-root")
    root = ARTEFACTS / userspace.artefact
    done = root / ".complete"
    require(
        done.is_file() or (root / "usr/bin/nvidia-smi").is_symlink(),
        f"Debian NVIDIA {userspace.version} {userspace.arch} userspace at {root}",
        how="scripts/make-nvidia-userspace.sh / make-nvidia-debs-userspace.sh (scripts/setup.sh)",
    )
    return Path(os.path.realpath(root))


@dataclass(frozen=True)
class Published:
    userspace: Userspace
    source: Path  # the full userspace root
    driver_root: Path
    init: subprocess.CompletedProcess[str]
    env: dict[str, str]  # the CLI's environment on that host (for `status` on the same node)


def publish_with_init(
    userspace: Userspace, base: Path, *, run_dir: Path | None = None, host_files: dict[str, str] | None = None
) -> Published:
    """``nvidia-driver init --no-wait`` of ``userspace`` on the re-stamped Talos host, into ``run_dir``
    (default ``base/run``): the root as the operator's consumers find it (device nodes included).
    ``host_files`` (path relative to the host copy -> text) are written into the copy first, e.g. MIG minors."""
    require(os.geteuid() == 0, "root (chroot, mknod, unshare)")
    source = userspace_root(userspace, base)
    path = os.environ.get("PATH", "/usr/bin:/bin")
    if userspace.arch == "arm64":
        require(shutil.which(QEMU), QEMU, how="apt-get install qemu-user-static (scripts/setup.sh)")
        path = qemu_ldconfig_shim(base, source)
    host = restamp_host(base / "host", userspace.version, userspace.arch)
    for relative, text in (host_files or {}).items():
        (host / relative).parent.mkdir(parents=True, exist_ok=True)
        (host / relative).write_text(text)
    run = run_dir or base / "run"
    env = node_env(host, source, run, path)
    done = subprocess.run(
        [str(CLI), "init", "--no-wait"], env=env, capture_output=True, text=True, check=False, timeout=300, cwd=REPO
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return Published(userspace, source, run / "driver", done, env)
