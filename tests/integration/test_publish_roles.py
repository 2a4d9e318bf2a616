"""Selection by role on the synthetic userspace (docs/publish.md): a missing dependency of an optional library
(nvidia-settings' GTK3 library without libgtk-3) is a warning and the root publishes; a missing dependency
of what init runs or of a core compute library is an error. What the toolkit mounts besides the
``*.so.<version>`` libraries is published: the EGL platform library with its own version, ``vdpau/``, the
unversioned ``libX.so`` links the image has, the EGL external platform config."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from helpers.toolkit import Difference, differences, path_problems, stand_in_dev_root, toolkit_view

from driver_container.base.errors import DriverContainerError
from driver_container.base.paths import HostPaths
from driver_container.publish.publisher import publish_driver_root
from driver_container.runtime.runner import Runner

V = "595.91.07"
LIB = "usr/lib/x86_64-linux-gnu"


def publish(userspace: Path, dr: Path) -> None:
    paths = HostPaths(
        userspace_root=userspace, driver_root_override=dr, run_dir=dr.parent / "run", procfs_root=Path("/nonexistent")
    )
    publish_driver_root(paths, V, Runner())


def test_optional_library_with_a_missing_dependency_warns_and_publishes(
    userspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dr = tmp_path / "driver"
    with caplog.at_level(logging.WARNING):
        publish(userspace, dr)
    assert (dr / LIB / f"libnvidia-gtk3.so.{V}").is_file()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"libnvidia-gtk3.so.{V} needs libgtk-3.so.0" in w for w in warnings), warnings
    assert not (dr / LIB / "libgtk-3.so.0").exists()


def test_core_library_with_a_missing_dependency_is_an_error(userspace: Path, tmp_path: Path) -> None:
    for name in ("libfixturedep.so.2", "libfixturedep.so.2.0.0"):
        (userspace / LIB / name).unlink()
    with pytest.raises(DriverContainerError, match=r"libnvidia-ml\.so\.595\.91\.07 needs libfixturedep\.so\.2"):
        publish(userspace, tmp_path / "driver")


def test_required_binary_with_a_missing_dependency_is_an_error(userspace: Path, tmp_path: Path) -> None:
    # nvidia-smi needs libnvidia-ml.so.1; with the NVML library renamed away only nvidia-smi lacks it.
    cur = userspace / LIB / "nvidia/current"
    os.rename(cur / f"libnvidia-ml.so.{V}", cur / "libnvidia-ml.so.unused")
    for link in (cur / "libnvidia-ml.so.1", userspace / LIB / "libnvidia-ml.so.1", userspace / "etc/ld.so.cache"):
        link.unlink()
    with pytest.raises(DriverContainerError, match=r"nvidia-smi needs libnvidia-ml\.so\.1"):
        publish(userspace, tmp_path / "driver")


def test_toolkit_files_are_published(userspace: Path, tmp_path: Path) -> None:
    dr = tmp_path / "driver"
    publish(userspace, dr)
    lib = dr / LIB
    assert (lib / "libnvidia-egl-wayland.so.1.1.13").is_file()
    assert os.readlink(lib / "libnvidia-egl-wayland.so.1") == "libnvidia-egl-wayland.so.1.1.13"
    assert (lib / f"vdpau/libvdpau_nvidia.so.{V}").is_file()
    assert os.readlink(lib / "vdpau/libvdpau_nvidia.so.1") == f"libvdpau_nvidia.so.{V}"
    assert os.readlink(lib / "libnvidia-ml.so") == "libnvidia-ml.so.1"
    assert (lib / "libnvidia-ml.so").resolve() == (lib / f"libnvidia-ml.so.{V}").resolve()
    assert not (lib / "libcuda.so").exists()  # the image has no libcuda.so link: none is invented
    assert (dr / "usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json").is_file()


def test_unversioned_link_to_another_file_is_not_published(
    userspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    os.symlink("libfixturedep.so.2", userspace / LIB / "libcuda.so")
    dr = tmp_path / "driver"
    with caplog.at_level(logging.WARNING):
        publish(userspace, dr)
    assert not (dr / LIB / "libcuda.so").exists()
    assert any("libcuda.so: resolves to" in r.getMessage() for r in caplog.records)


# What only the layout changes: Debian's nvidia/current directory, where the published root has one library dir.
LAYOUT = {
    Difference("env", "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/<triplet>/nvidia/current", "lacks"),
    Difference("ldcache-folder", "/usr/lib/<triplet>/nvidia/current", "lacks"),
}


def test_the_toolkit_finds_in_the_root_all_it_finds_in_the_image(userspace: Path, tmp_path: Path) -> None:
    """NVIDIA's real toolkit (tests/helpers/toolkit.py) on the image and on its published root: nothing it
    gives a container from the image is missing from the root, and nothing in the root's spec dangles.
    The dev root holds stand-in nodes made with mknod (the synthetic userspace has no dev/)."""
    dr = tmp_path / "driver"
    publish(userspace, dr)
    dev = stand_in_dev_root(tmp_path / "dev-root")
    source = toolkit_view(userspace, dev, V, tmp_path / "source")
    root = toolkit_view(dr, dev, V, tmp_path / "root")
    assert {d for d in differences(source, root) if d.published != "adds"} == LAYOUT
    assert path_problems(root) == []
