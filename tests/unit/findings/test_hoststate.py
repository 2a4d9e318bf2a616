"""hoststate/userspace/modfiles/findings on fixture trees and hostile copies of them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.support import FIXTURES, REPO, fixture_paths, require

from driver_container.base.problems import Problem
from driver_container.base.resolver import Root
from driver_container.findings import check, has_errors, talos_module_snippet, values_equal
from driver_container.inspect.hoststate import inspect_host, read_loaded_modules
from driver_container.inspect.userspace import find_userspace
from driver_container.settings import Settings

HOSTS = FIXTURES / "hosts"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    copy = tmp_path / "tree"
    shutil.copytree(HOSTS / "talos-1.13-open-595", copy, symlinks=True)
    return copy


def codes(tree: Path, settings: Settings | None = None) -> set[str]:
    return {f.code for f in check(inspect_host(fixture_paths(tree), settings or Settings()))}


def test_loaded_modules_from_sysfs_without_proc_modules() -> None:
    mods = read_loaded_modules(fixture_paths(HOSTS / "talos-1.13-no-proc-modules")).modules
    assert [m for m in mods if mods[m].loaded] == ["nvidia", "nvidia_uvm", "nvidia_modeset"]
    assert mods["nvidia"].parameters["NVreg_EnableGpuFirmware"] == "18"
    assert mods["nvidia_uvm"].parameters == {"uvm_perf_prefetch_enable": "1"}
    assert (mods["nvidia"].state, mods["nvidia"].taint, mods["nvidia"].refcnt) == ("live", "O", 82)


def test_unexpected_proc_lines_are_reported_not_fatal(tree: Path) -> None:
    with (tree / "proc/modules").open("a") as f:
        f.write("\x00\x01 binary junk\nnvidia_drm 1 2 3 4 5 6 7 8\n")
    found = read_loaded_modules(fixture_paths(tree))
    mods, problems = found.modules, found.problems
    assert mods["nvidia"].loaded and not mods["nvidia_drm"].loaded
    assert len(problems) == 2 and all("unexpected line" in p.message for p in problems)
    assert {p.path for p in problems} == {str(tree / "proc/modules")}
    (tree / "proc/driver/nvidia/version").write_text("garbage\n")
    state = inspect_host(fixture_paths(tree), Settings())
    assert state.nvidia_version is None
    assert any("driver/nvidia/version" in f.message for f in check(state) if f.code == "HOST_FILE_UNREADABLE")
    assert (
        Problem(
            str(tree / "proc/driver/nvidia/version"),
            "no 'NVRM version: NVIDIA UNIX ... Kernel Module <version>' line (first line: 'garbage')",
        )
        in state.problems
    )


def test_unreadable_and_looping_sysfs_files(tree: Path) -> None:
    version = tree / "sys/module/nvidia/version"
    version.unlink()
    version.mkdir()
    os.symlink("srcversion", tree / "sys/module/nvidia/srcversion.tmp")
    (tree / "sys/module/nvidia/srcversion").unlink()
    os.rename(tree / "sys/module/nvidia/srcversion.tmp", tree / "sys/module/nvidia/srcversion")  # self-loop
    found = read_loaded_modules(fixture_paths(tree))
    nvidia = found.modules["nvidia"]
    assert nvidia.loaded and nvidia.version is None and nvidia.srcversion is None
    assert Problem(str(version), "not a regular file") in found.problems
    assert Problem(str(tree / "sys/module/nvidia/srcversion"), "too many levels of symbolic links") in found.problems
    assert "HOST_FILE_UNREADABLE" in codes(tree)


def test_absolute_symlink_out_of_host_root_is_not_followed(tree: Path, tmp_path: Path) -> None:
    video = tree / "host/usr/lib/modules/6.18.44-talos/kernel/drivers/video"
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(video / "nvidia.ko", outside / "nvidia.ko")
    (video / "nvidia.ko").unlink()
    os.symlink(str(outside / "nvidia.ko"), video / "nvidia.ko")  # absolute: resolves to <host>/<that path>
    state = inspect_host(fixture_paths(tree), Settings())
    assert "nvidia" not in state.module_files
    assert "MODULE_FILE_MISSING" in {f.code for f in check(state)}


def test_corrupt_module_file_is_a_finding(tree: Path) -> None:
    (tree / "host/usr/lib/modules/6.18.44-talos/kernel/drivers/video/nvidia.ko").write_bytes(b"\x7fELF" + b"\x00" * 20)
    state = inspect_host(fixture_paths(tree), Settings())
    assert state.module_files["nvidia"].error
    assert "MODULE_FILE_UNREADABLE" in {f.code for f in check(state)}


def test_vermagic_and_invalid_parameter_file(tree: Path) -> None:
    (tree / "proc/sys/kernel/osrelease").write_text("6.18.25-talos\n")
    mods = tree / "host/usr/lib/modules"
    (mods / "6.18.44-talos").rename(mods / "6.18.25-talos")
    (tree / "drivers/nvidia.conf").write_text("NVreg_EnableGpuFirmware\n")
    found = codes(tree)
    assert {"VERMAGIC_MISMATCH", "PARAMETER_FILE_INVALID"} <= found


def test_missing_modules_and_userspace(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "proc").mkdir(parents=True)
    state = inspect_host(fixture_paths(empty), Settings(gpu_direct_rdma=True))
    found = {f.code for f in check(state)}
    assert {"NVIDIA_NOT_LOADED", "UVM_NOT_LOADED", "USERSPACE_MISSING", "PEERMEM_NOT_LOADED"} <= found
    assert "PLATFORM_UNKNOWN" in found and has_errors(check(state))
    assert [f.severity for f in check(state)] == sorted(
        (f.severity for f in check(state)), key=("error", "warning", "info").index
    )


def test_firmware_missing_when_image_lacks_it(tree: Path) -> None:
    shutil.rmtree(tree / "userspace/lib/firmware")
    state = inspect_host(fixture_paths(tree), Settings())
    assert state.firmware == {"nvidia/595.91.07/gsp_ga10x.bin": None, "nvidia/595.91.07/gsp_tu10x.bin": None}
    fw = tree / "host/usr/lib/firmware/nvidia/595.91.07"  # Talos: /lib -> usr/lib
    fw.mkdir(parents=True)
    for name in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        (fw / name).write_text("x")
    assert "FIRMWARE_MISSING" not in codes(tree)


def test_userspace_prefers_libcuda_and_reports_ambiguity(tree: Path) -> None:
    lib = tree / "userspace/usr/lib/x86_64-linux-gnu"
    (lib / "libcuda.so.595.91.07").unlink()
    us = find_userspace(fixture_paths(tree).userspace)
    assert (us.version, us.libcuda, us.source) == ("595.91.07", None, "search-path")
    (lib / "libcuda.so.580.178.04").write_text("x")
    us = find_userspace(fixture_paths(tree).userspace)
    assert us.version == "580.178.04" and us.versions_seen == ("580.178.04", "595.91.07")


def test_userspace_from_ld_so_cache(tmp_path: Path) -> None:
    gcc, ldconfig = shutil.which("gcc"), shutil.which("ldconfig") or "/sbin/ldconfig"
    require(gcc and Path(ldconfig).exists(), "gcc and ldconfig", how="apt-get install gcc libc-bin")
    root = tmp_path / "root"
    libdir = root / "opt/nvidia/lib"
    libdir.mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc/ld.so.conf").write_text("/opt/nvidia/lib\n")
    src = tmp_path / "x.c"
    src.write_text("int cuInit(unsigned f) { return (int)f; }\n")
    subprocess.run(
        [
            str(gcc),
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-o",
            str(libdir / "libcuda.so.595.91.07"),
            str(src),
        ],
        check=True,
    )
    subprocess.run([ldconfig, "-r", str(root)], check=True)
    us = find_userspace(Root(root))
    assert (us.version, us.source, str(us.libcuda)) == (
        "595.91.07",
        "ld.so.cache",
        "/opt/nvidia/lib/libcuda.so.595.91.07",
    )


def test_values_equal_and_snippet() -> None:
    assert values_equal("1", "Y") and values_equal("n", "N") and not values_equal("1", "N")
    assert values_equal("0x12", "18") and values_equal('""', '""') and not values_equal("0", "18")
    snippet = talos_module_snippet("nvidia_uvm", ["uvm_perf_prefetch_enable=0"], "v1.13.9")
    assert "      - name: nvidia_uvm\n        parameters:\n          - uvm_perf_prefetch_enable=0" in snippet
    assert "kind: KernelModuleConfig" not in snippet  # one form per version (test_talos_facts.py)
    snippet = talos_module_snippet("nvidia_uvm", ["uvm_perf_prefetch_enable=0"], "v1.14.0")
    assert "kind: KernelModuleConfig\nname: nvidia_uvm\nparameters:\n  - uvm_perf_prefetch_enable=0" in snippet


def test_read_loaded_modules_is_cheap() -> None:
    probe = (
        "import sys; from driver_container.inspect.hoststate import read_loaded_modules; "
        "from driver_container.base.paths import HostPaths; from pathlib import Path; "
        f"t = Path({str(HOSTS / 'talos-1.13-open-595')!r}); "
        "m = read_loaded_modules(HostPaths(procfs_root=t / 'proc', sysfs_root=t / 'sys')); "
        "assert m.modules['nvidia'].loaded; "
        "heavy = ('elftools', 'zstandard', 'requests', 'driver_container.formats.kmod'); "
        "print(sorted(x for x in sys.modules if x.startswith(heavy)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"
