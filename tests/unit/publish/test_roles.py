"""roles (pure) and how the planner and the closure check use them (docs/publish.md)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from test_plan import T, V, space

from driver_container.base.problems import Problem
from driver_container.formats.elfdeps import ElfDeps
from driver_container.publish.cache_check import closure_problems
from driver_container.publish.model import SourceFile
from driver_container.publish.plan import plan_publish
from driver_container.publish.roles import binary_is_required, is_extra_library, library_is_required, link_name

U = Path("/userspace")


def lib(inner: str, soname: str, *needed: str) -> SourceFile:
    return SourceFile(
        U / inner, f"USERSPACE_ROOT/{inner}", 100, 1, 0o644, ElfDeps("EM_X86_64", 64, "ET_DYN", None, soname, needed)
    )


def test_link_name_is_the_toolkits_so_link() -> None:
    assert link_name("libnvidia-ml.so.1") == "libnvidia-ml.so"
    assert link_name(f"libnvidia-glcore.so.{V}") == "libnvidia-glcore.so"
    assert link_name("libfoo.so") == "libfoo.so"
    assert link_name("ld-linux") == ""


def test_roles() -> None:
    assert library_is_required(f"libcuda.so.{V}") and library_is_required(f"libnvidia-nvvm.so.{V}")
    assert not library_is_required(f"libnvidia-gtk3.so.{V}") and not library_is_required(f"libGLX_nvidia.so.{V}")
    assert not library_is_required(f"libnvidia-pkcs11-openssl3.so.{V}")
    assert binary_is_required("nvidia-smi") and not binary_is_required("nvidia-cuda-mps-control")
    assert is_extra_library("libnvidia-egl-wayland.so.1.1.13") and not is_extra_library("libnvidia-egl-wayland.so.1")
    assert is_extra_library("libnvidia-nvvm70.so.4") and not is_extra_library(f"libnvidia-ml.so.{V}")


def test_plan_places_extras_vdpau_and_dev_links() -> None:
    wayland = lib(f"usr/lib/{T}/libnvidia-egl-wayland.so.1.1.13", "libnvidia-egl-wayland.so.1")
    vdpau = lib(f"usr/lib/{T}/vdpau/libvdpau_nvidia.so.{V}", "libvdpau_nvidia.so.1")
    plan = plan_publish(
        space(
            extras=(("libnvidia-egl-wayland.so.1.1.13", wayland),),
            vdpau=((f"libvdpau_nvidia.so.{V}", vdpau),),
            dev_links=(("libcuda.so", "libcuda.so.1"), ("libgone.so", "libgone.so.1")),
        )
    )
    entries = {str(e.path): e for e in plan.entries}
    d = f"usr/lib/{T}"
    assert entries[f"{d}/libnvidia-egl-wayland.so.1"].target == "libnvidia-egl-wayland.so.1.1.13"
    assert entries[f"{d}/vdpau/libvdpau_nvidia.so.1"].target == f"libvdpau_nvidia.so.{V}"
    assert entries[f"{d}/libcuda.so"].target == "libcuda.so.1"
    assert f"{d}/libgone.so" not in entries  # its library is not published
    assert "libnvidia-egl-wayland.so.1" in plan.sonames and "libnvidia-egl-wayland.so.1" not in plan.nvidia_sonames
    assert "libvdpau_nvidia.so.1" not in plan.sonames  # not in ld.so.conf's dir, so not in the cache


def test_closure_check_accepts_only_the_recorded_missing_names() -> None:
    gtk = lib(f"usr/lib/libnvidia-gtk3.so.{V}", f"libnvidia-gtk3.so.{V}", "libgtk-3.so.0", "libX11.so.6")
    libraries = ((f"libnvidia-gtk3.so.{V}", gtk),)
    strict = plan_publish(space(libraries=libraries))
    gtk3 = f"usr/lib/{T}/libnvidia-gtk3.so.{V}"
    assert sorted(map(str, closure_problems(strict))) == [
        f"{gtk3}: needs libX11.so.6, which is not published",
        f"{gtk3}: needs libgtk-3.so.0, which is not published",
    ]
    accepted = plan_publish(space(libraries=libraries, missing=((str(gtk.real), "libgtk-3.so.0"),)))
    assert closure_problems(accepted) == (Problem(gtk3, "needs libX11.so.6, which is not published"),)
    assert PurePosixPath(f"usr/lib/{T}/libnvidia-gtk3.so.{V}") in {e.path for e in accepted.entries}
