"""The Talos host fixtures stand for hosts that existed (tests/fixtures/hosts/README.md names the sources)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.support import FIXTURES

from driver_container.inspect.platform import parse_os_release
from driver_container.readers.kmod import read_module

HOSTS = FIXTURES / "hosts"
TALOS = sorted(p for p in HOSTS.iterdir() if p.is_dir() and p.name.startswith("talos-"))

# Talos release -> kernel release and the drivers its extensions ship (production, LTS); see the README.
RELEASES = {
    "v1.9.0": ("6.12.5-talos", {"550.127.08", "535.216.03"}),
    "v1.11.0": ("6.12.43-talos", {"570.172.08", "535.247.01"}),
    "v1.13.9": ("6.18.44-talos", {"595.91.07", "580.178.04"}),
}
# Deliberate exceptions, each explained in its README.
REBUILT = {"talos-1.11-kmod-535": "535.309.01"}
MODULES = ("nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm", "nvidia-peermem")


def _release_dir(tree: Path) -> tuple[str, Path]:
    (kernel,) = {p for p in (tree / "host/usr/lib/modules").glob("*")} | {
        p for p in (tree / "host/lib/modules").glob("*") if not (tree / "host/lib").is_symlink()
    }
    return kernel.name, kernel


@pytest.mark.parametrize("tree", TALOS, ids=lambda p: p.name)
def test_talos_version_kernel_and_driver_existed_together(tree: Path) -> None:
    version = parse_os_release((tree / "host/etc/os-release").read_text())["VERSION_ID"]
    kernel, drivers = RELEASES[version]
    assert (tree / "proc/sys/kernel/osrelease").read_text().strip() == kernel
    assert (tree / "proc/version").read_text().startswith(f"Linux version {kernel} ")
    release, base = _release_dir(tree)
    assert release == kernel
    nvidia = read_module(next(base.rglob("nvidia.ko")))
    assert nvidia.version in drivers or nvidia.version == REBUILT.get(tree.name), nvidia.version
    # Talos < 1.10 keeps modules under /lib/modules; /usr-merged from 1.10 on.
    assert ("/usr/lib/modules/" in str(base)) is (version != "v1.9.0")


@pytest.mark.parametrize("tree", TALOS, ids=lambda p: p.name)
def test_vermagic_modules_dep_and_layout(tree: Path) -> None:
    kernel, base = _release_dir(tree)
    proprietary = any(base.glob("extras/nvidia.ko"))
    sub = "extras" if proprietary else "kernel/drivers/video"
    # 6.18 kernels: clang, PREEMPT_DYNAMIC ("preempt"); 6.12 kernels: gcc, PREEMPT_NONE (no "preempt").
    flags = "SMP preempt mod_unload modversions " if kernel.startswith("6.18.") else "SMP mod_unload modversions "
    for name in MODULES:
        info = read_module(base / sub / f"{name}.ko")
        assert info.vermagic == f"{kernel} {flags}", (name, info.vermagic)
        if name in ("nvidia", "nvidia-modeset"):
            assert info.license == ("NVIDIA" if proprietary else "Dual MIT/GPL")
    assert not (base / sub / "nvidia-fs.ko").exists()  # not in the extensions' file list
    dep = dict(line.split(":", 1) for line in (base / "modules.dep").read_text().splitlines())
    assert dep[f"{sub}/nvidia.ko"] == ""
    assert dep[f"{sub}/nvidia-uvm.ko"] == f" {sub}/nvidia.ko"
    assert dep[f"{sub}/nvidia-drm.ko"] == f" {sub}/nvidia-modeset.ko {sub}/nvidia.ko"
    assert all((base / path).is_file() for path in dep)
