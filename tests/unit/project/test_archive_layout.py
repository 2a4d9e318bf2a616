"""The Dockerfile's archive route lays NVIDIA's driver archive out by the archive's own MANIFEST
(scripts/nvidia-archive-layout.py), and the archive CI feeds it has NVIDIA's layout (scripts/make-nvidia-archive.py).

The tree here is a small `.run`-shaped one (the shape scripts/make-nvidia-run-tree.sh makes of Debian's files) with
stand-in bytes; tests/container/test_archive_image.py builds the route from the real files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tarfile
from pathlib import Path

import pytest
from helpers.release import archive_layout, archive_maker
from helpers.support import FIXTURES

from driver_container.base.paths import HostPaths

V = "535.309.01"
TRIPLET = "x86_64-linux-gnu"
LIB = f"usr/lib/{TRIPLET}"
lay = archive_layout()
maker = archive_maker()


def _tree(base: Path) -> Path:
    tree = base / "tree"
    (tree / "firmware").mkdir(parents=True)
    for name in (f"libcuda.so.{V}", f"libnvidia-ml.so.{V}", f"libvdpau_nvidia.so.{V}", f"libnvidia-glcore.so.{V}"):
        (tree / name).write_bytes(b"\x7fELF " + name.encode())
    for name in ("nvidia-smi", "nvidia-modprobe"):
        (tree / name).write_bytes(b"#!/bin/true\n")
    (tree / "firmware/gsp_ga10x.bin").write_bytes(b"gsp")
    (tree / "nvidia_icd.json").write_text('{"ICD": {"library_path": "__NV_VK_ICD__"}}')
    (tree / "10_nvidia.json").write_text("{}")
    (tree / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    (tree / ".manifest").write_text(f"stand-in\n{V}\n")
    return tree


def _extract(archive: Path, dest: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    (top,) = dest.iterdir()
    return top


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    return maker.make(_tree(tmp_path), V, "x86_64", tmp_path / "out")


def test_the_made_archive_has_nvidias_layout_and_its_pins(archive: Path, tmp_path: Path) -> None:
    assert archive.name == f"nvidia_driver-linux-x86_64-{V}-archive.tar.xz"
    payload = archive.read_bytes()
    for algorithm in ("sha256", "sha512"):
        pin = Path(f"{archive}.{algorithm}").read_text().strip()
        assert pin == hashlib.new(algorithm, payload).hexdigest()
    top = _extract(archive, tmp_path / "x")
    assert top.name == f"nvidia_driver-linux-x86_64-{V}-archive"
    assert {p.name for p in top.iterdir()} == {"bin", "lib", "etc", "firmware", "supported-gpus", "LICENSE", "MANIFEST"}
    manifest = (top / "MANIFEST").read_text().splitlines()
    assert manifest[1] == V
    assert f"libcuda.so.{V} 0755 CUDA_LIB NATIVE" in manifest
    assert f"libvdpau_nvidia.so.{V} 0755 VDPAU_LIB NATIVE vdpau/" in manifest
    assert f"libcuda.so.1 0000 CUDA_SYMLINK NATIVE libcuda.so.{V}" in manifest
    gpus = json.loads((top / "supported-gpus/supported-gpus.json").read_text())
    assert gpus == json.loads((FIXTURES / "supported-gpus/supported-gpus-595.json").read_text())
    # The same tree gives the same bytes: the pins of a rebuilt archive hold.
    again = maker.make(_tree(tmp_path / "again"), V, "x86_64", tmp_path / "out2")
    assert again.read_bytes() == payload


def test_the_layout_installs_exactly_the_manifests_set(archive: Path, tmp_path: Path) -> None:
    top = _extract(archive, tmp_path / "x")
    staging = tmp_path / "staging"
    counts = lay.lay_out(top, staging, TRIPLET, V)
    assert counts["links"] == 4 and counts["left out"] == 6, counts  # 2 compat32, installer, 2 docs, kernel source
    files = sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file() or p.is_symlink())
    assert files == sorted(
        [
            f"{LIB}/libcuda.so.{V}",
            f"{LIB}/libcuda.so.1",
            f"{LIB}/libcuda.so",
            f"{LIB}/libnvidia-ml.so.{V}",
            f"{LIB}/libnvidia-ml.so.1",
            f"{LIB}/libnvidia-ml.so",
            f"{LIB}/libnvidia-glcore.so.{V}",
            f"{LIB}/vdpau/libvdpau_nvidia.so.{V}",
            "usr/bin/nvidia-smi",
            "usr/bin/nvidia-modprobe",
            f"usr/share/nvidia/firmware/nvidia/{V}/gsp_ga10x.bin",
            "etc/vulkan/icd.d/nvidia_icd.json",
            "usr/share/glvnd/egl_vendor.d/10_nvidia.json",
            "etc/OpenCL/vendors/nvidia.icd",
            "usr/share/nvidia-driver-assistant/supported-gpus/supported-gpus.json",
            "licenses/NVIDIA/LICENSE",
            "usr/share/nvidia/driver-version",
        ]
    )
    assert os.readlink(staging / LIB / "libcuda.so.1") == f"libcuda.so.{V}"
    assert os.readlink(staging / LIB / "libcuda.so") == "libcuda.so.1"
    assert stat.S_IMODE((staging / "usr/bin/nvidia-modprobe").stat().st_mode) == 0o4755
    assert "libGLX_nvidia.so.0" in (staging / "etc/vulkan/icd.d/nvidia_icd.json").read_text()
    assert (staging / "usr/share/nvidia/driver-version").read_text() == f"{V}\n"


def test_supported_gpus_lands_where_the_entrypoint_reads_it() -> None:
    assert Path("/", lay.SUPPORTED_GPUS) == HostPaths().supported_gpus_file


def test_nscq_is_installed_where_the_archive_has_it(archive: Path, tmp_path: Path) -> None:
    top = _extract(archive, tmp_path / "x")
    (top / f"lib/libnvidia-nscq.so.{V}").write_bytes(b"\x7fELF nscq")
    lay.lay_out(top, tmp_path / "staging", TRIPLET, V)
    assert (tmp_path / "staging" / LIB / f"libnvidia-nscq.so.{V}").read_bytes() == b"\x7fELF nscq"


def test_another_version_a_missing_file_or_a_path_out_of_the_archive_fails(archive: Path, tmp_path: Path) -> None:
    top = _extract(archive, tmp_path / "x")
    with pytest.raises(lay.LayoutError, match=re.escape("the build pins '550.163.01'")):
        lay.lay_out(top, tmp_path / "s1", TRIPLET, "550.163.01")
    (top / f"lib/libnvidia-ml.so.{V}").unlink()
    with pytest.raises(
        lay.LayoutError, match=re.escape(f"libnvidia-ml.so.{V} (UTILITY_LIB) is in MANIFEST but no regular file")
    ):
        lay.lay_out(top, tmp_path / "s2", TRIPLET, V)
    with pytest.raises(lay.LayoutError, match="leaves the archive"):
        lay.parse_manifest(f"x\n{V}\nx86_64\n../etc/passwd 0644 UTILITY_BINARY\n")
    (top / "supported-gpus/supported-gpus.json").unlink()
    (top / "MANIFEST").write_text(f"x\n{V}\nx86_64\n")
    with pytest.raises(lay.LayoutError, match=re.escape("no supported-gpus/supported-gpus.json")):
        lay.lay_out(top, tmp_path / "s3", TRIPLET, V)
    assert lay.main([str(top), str(tmp_path / "s4"), TRIPLET, V]) == 1


def test_manifest_entries_in_nvidias_forms() -> None:
    version, entries = lay.parse_manifest(
        "NVIDIA Accelerated Graphics Driver for Linux-x86_64 595.91.07\n595.91.07\nx86_64\n"
        "kernel/nvidia.c 0644 KERNEL_MODULE_SRC INHERIT_PATH_DEPTH:1 MODULE:nvidia\n"
        "libnvidia-allocator.so.595.91.07 0755 OPENGL_LIB NATIVE\n"
        "nvidia-drm_gbm.so 0000 GBM_BACKEND_LIB_SYMLINK NATIVE gbm/ ../libnvidia-allocator.so.1\n"
        "32/libcuda.so.595.91.07 0755 CUDA_LIB COMPAT32\n"
        "libGL.so.1.7.0 0755 GLVND_LIB NATIVE\n"
        "nvidia-settings 0755 UTILITY_BINARY\n"
        "firmware/gsp_ga10x.bin 0444 FIRMWARE MODULE:resman\n"
    )
    assert version == "595.91.07"
    where = {e.path: lay.destination(e, LIB, version) for e in entries}
    assert where == {
        "kernel/nvidia.c": None,
        "libnvidia-allocator.so.595.91.07": f"{LIB}/libnvidia-allocator.so.595.91.07",
        "nvidia-drm_gbm.so": f"{LIB}/gbm/nvidia-drm_gbm.so",
        "32/libcuda.so.595.91.07": None,
        "libGL.so.1.7.0": None,
        "nvidia-settings": None,
        "firmware/gsp_ga10x.bin": "usr/share/nvidia/firmware/nvidia/595.91.07/gsp_ga10x.bin",
    }
    gbm = next(e for e in entries if e.kind == "GBM_BACKEND_LIB_SYMLINK")
    assert (gbm.subdir, gbm.target) == ("gbm", "../libnvidia-allocator.so.1")
