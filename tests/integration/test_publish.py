"""publish_driver_root on the synthetic Debian-like userspace (tests/fixtures/userspace/debian-595.91.07)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import trees
from helpers.nvidia_sandbox import run_nvidia
from helpers.support import require

from driver_container.base.errors import DriverContainerError, PublishError, UserspaceError
from driver_container.base.paths import HostPaths
from driver_container.formats.ldcache import lookup, parse_ld_cache
from driver_container.publish.publisher import publish_driver_root
from driver_container.runtime.runner import Runner

V = "595.91.07"
LIB = "usr/lib/x86_64-linux-gnu"


def host(userspace: Path, driver_root: Path, proc: Path | None = None) -> HostPaths:
    proc = proc or Path("/nonexistent")
    return HostPaths(
        userspace_root=userspace,
        driver_root_override=driver_root,
        run_dir=driver_root.parent / "run",  # the publish-failed marker: never the machine's /run/nvidia
        procfs_root=proc,
        own_procfs_root=proc,
    )


def snapshot(root: Path) -> dict[str, trees.Entry]:
    """Every file and link below ``root``: mode, content or link target, mtime. Not directories: a publish
    stages inside the root, which changes their mtimes."""
    return trees.snapshot(root, dirs=False, nlink=False, mtime=True)


def same_as_clean(root: Path, clean: Path) -> None:
    """Identical content, modes and manifest (manifest times aside: they record when files were written)."""
    skip = {"etc/ld.so.cache", ".driver-container/manifest.json"}

    def content(r: Path) -> dict[str, tuple[str, str]]:
        return {k: v[:2] for k, v in snapshot(r).items() if k not in skip}

    def manifest(r: Path) -> list[dict[str, object]]:
        files = json.loads((r / ".driver-container/manifest.json").read_text())["files"]
        return [{k: v for k, v in rec.items() if k != "mtime_ns"} for rec in files]

    assert content(root) == content(clean)
    assert manifest(root) == manifest(clean)


def test_published_tree_layout_links_and_manifest(userspace: Path, tmp_path: Path) -> None:
    dr = tmp_path / "driver"
    report = publish_driver_root(host(userspace, dr), V, Runner())
    assert report.binaries == ("usr/bin/nvidia-smi",)
    assert report.firmware == (f"lib/firmware/nvidia/{V}/gsp_ga10x.bin", f"lib/firmware/nvidia/{V}/gsp_tu10x.bin")
    assert f"{LIB}/libcuda.so.{V}" in report.libraries and f"{LIB}/libfixturedep.so.2.0.0" in report.libraries
    assert os.readlink(dr / LIB / "libcuda.so.1") == f"libcuda.so.{V}"
    assert os.readlink(dr / "sbin/ldconfig") == "ldconfig.real"
    assert (dr / "lib64/ld-linux-x86-64.so.2").is_file() and not (dr / "lib64/ld-linux-x86-64.so.2").is_symlink()
    assert (dr / "etc/ld.so.conf").read_text().splitlines()[-1] == f"/{LIB}"
    for dirpath, dirs, files in os.walk(dr):
        for name in files + dirs:
            p = Path(dirpath) / name
            mode = p.lstat().st_mode
            if p.is_symlink():
                assert not os.readlink(p).startswith("/"), p
                assert p.resolve().is_relative_to(dr), p
            else:
                assert not mode & (stat.S_ISUID | stat.S_ISGID | stat.S_IWOTH | stat.S_IWGRP), p
    manifest = json.loads((dr / ".driver-container/manifest.json").read_text())
    assert manifest["version"] == V
    for rec in manifest["files"]:
        p = dr / rec["path"]
        if rec["type"] == "file":
            assert hashlib.sha256(p.read_bytes()).hexdigest() == rec["sha256"] and p.stat().st_size == rec["size"]
            assert stat.S_IMODE(p.stat().st_mode) == rec["mode"]
        elif rec["type"] == "dir":  # usr/src for the operator's GDS/GDRCopy sidecars: empty
            assert p.is_dir() and not p.is_symlink() and not any(p.iterdir()), p
        else:
            assert os.readlink(p) == rec["target"]


def test_cache_read_back_by_our_reader_and_ldconfig(userspace: Path, tmp_path: Path) -> None:
    dr = tmp_path / "driver"
    publish_driver_root(host(userspace, dr), V, Runner())
    entries = parse_ld_cache((dr / "etc/ld.so.cache").read_bytes())
    for soname, file in (("libcuda.so.1", f"libcuda.so.{V}"), ("libnvidia-ml.so.1", f"libnvidia-ml.so.{V}")):
        entry = lookup(entries, soname)
        assert entry is not None and (dr / entry.value.lstrip("/")).resolve() == dr / LIB / file
    printed = subprocess.run(
        ["ldconfig", "-p", "-C", str(dr / "etc/ld.so.cache")], capture_output=True, text=True, check=False
    )
    assert f"libcuda.so.1 (libc6,x86-64) => /{LIB}/libcuda.so.1" in printed.stdout
    assert f"libnvidia-glcore.so.{V} (libc6,x86-64) => /{LIB}/libnvidia-glcore.so.{V}" in printed.stdout


def test_chroot_runs_the_published_binary(userspace: Path, tmp_path: Path) -> None:
    require(os.geteuid() == 0, "root (chroot)")
    dr = tmp_path / "driver"
    publish_driver_root(host(userspace, dr), V, Runner())
    done = run_nvidia(["chroot", str(dr), "/usr/bin/nvidia-smi"])
    assert done.returncode == 0, done.stderr
    assert f"libnvidia-ml {V}" in done.stdout


def test_restart_rewrites_nothing(userspace: Path, tmp_path: Path) -> None:
    dr = tmp_path / "driver"
    publish_driver_root(host(userspace, dr), V, Runner())
    before = snapshot(dr)
    report = publish_driver_root(host(userspace, dr), V, Runner())
    assert (report.written, report.removed, report.ldconfig_ran) == (0, 0, False)
    assert snapshot(dr) == before


def _elf_reads(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("ELF headers:")]


def test_restart_reads_no_elf_header_and_a_touched_library_is_read_again(
    userspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dr = tmp_path / "driver"
    caplog.set_level(logging.DEBUG, logger="driver_container.publish.scan")
    publish_driver_root(host(userspace, dr), V, Runner())
    first = _elf_reads(caplog)
    assert len(first) == 1 and not first[0].startswith("ELF headers: 0 read")
    caplog.clear()
    publish_driver_root(host(userspace, dr), V, Runner())
    assert _elf_reads(caplog)[0].startswith("ELF headers: 0 read, ")  # facts reused from the manifest
    lib = userspace / LIB / "nvidia/current" / f"libcuda.so.{V}"
    st = lib.stat()
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # same size, new mtime: not the file parsed before
    caplog.clear()
    report = publish_driver_root(host(userspace, dr), V, Runner())
    assert _elf_reads(caplog)[0].startswith("ELF headers: 1 read, ")
    assert report.written == 1
    assert report.copied_early == 1  # listed by name, so copied while the scan ran, like on a first publish


def test_first_publish_copies_the_listed_files_while_scanning(userspace: Path, tmp_path: Path) -> None:
    report = publish_driver_root(host(userspace, dr := tmp_path / "driver"), V, Runner())
    versioned = {n for n in os.listdir(dr / LIB) if n.endswith(f".so.{V}") and not (dr / LIB / n).is_symlink()}
    firmware = os.listdir(dr / "lib/firmware/nvidia" / V)
    assert versioned and firmware
    assert report.copied_early == len(versioned) + len(firmware)  # the rest waited for the scan to name it
    assert sorted(os.listdir(dr / ".driver-container")) == ["manifest.json"]


def test_changed_files_replaced_and_stale_removed(userspace: Path, tmp_path: Path) -> None:
    dr = tmp_path / "driver"
    publish_driver_root(host(userspace, dr), V, Runner())
    (userspace / "etc/OpenCL/vendors/nvidia.icd").unlink()
    (userspace / "etc/vulkan/icd.d/nvidia_icd.json").write_text('{"changed": true}\n')
    report = publish_driver_root(host(userspace, dr), V, Runner())
    assert (report.written, report.removed) == (1, 1)
    assert not (dr / "etc/OpenCL/vendors/nvidia.icd").exists()
    assert (dr / "etc/vulkan/icd.d/nvidia_icd.json").read_text() == '{"changed": true}\n'
    assert dr.is_dir()


def test_repairs_tampered_and_leftover_files(userspace: Path, tmp_path: Path) -> None:
    """The state a SIGKILL can leave (temporaries, a half-replaced file) is repaired to a clean publish."""
    clean, dr = tmp_path / "clean", tmp_path / "driver"
    publish_driver_root(host(userspace, clean), V, Runner())
    publish_driver_root(host(userspace, dr), V, Runner())
    (dr / LIB / f".libcuda.so.{V}.x1y2z3.dc-tmp").write_bytes(b"partial")
    (dr / LIB / f"libnvidia-ml.so.{V}").write_bytes(b"garbage")
    (dr / LIB / "libcuda.so.1").unlink()
    publish_driver_root(host(userspace, dr), V, Runner())
    same_as_clean(dr, clean)


PUBLISHED_MANIFEST = ".driver-container/manifest.json"


def _publish_process(userspace: Path, driver: Path, started: Path) -> subprocess.Popen[bytes]:
    """publish_driver_root in a process of its own, which creates ``started`` just before the call."""
    code = (
        "from pathlib import Path; from driver_container.base.paths import HostPaths;"
        "from driver_container.runtime.runner import Runner;"
        "from driver_container.publish.publisher import publish_driver_root;"
        f"Path({str(started)!r}).touch();"
        f"publish_driver_root(HostPaths(userspace_root=Path({str(userspace)!r}), "
        f"driver_root_override=Path({str(driver)!r}), run_dir=Path({str(driver.parent / 'run')!r}), "
        f"procfs_root=Path('/nonexistent')), {V!r}, Runner())"
    )
    started.unlink(missing_ok=True)
    return subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.DEVNULL)


def _wait_started(proc: subprocess.Popen[bytes], started: Path) -> float:
    """Poll (1 ms, at most 60 s) until the process is about to publish; the monotonic time then."""
    deadline = time.monotonic() + 60
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    return time.monotonic()


def _publish_duration(userspace: Path, driver: Path, started: Path) -> float:
    """Seconds from the start of publish_driver_root to its manifest (written last), in a whole process."""
    proc = _publish_process(userspace, driver, started)
    begun = _wait_started(proc, started)
    while proc.poll() is None and not (driver / PUBLISHED_MANIFEST).exists():
        time.sleep(0.001)
    duration = time.monotonic() - begun
    assert proc.wait(timeout=60) == 0
    return duration


def _kill_mid_publish(userspace: Path, driver: Path, started: Path, delay: float) -> bool:
    """SIGKILL the publishing process ``delay`` s into publish_driver_root. True when the kill landed
    mid-publish: the process was still running and the manifest, which a publish writes last, is absent."""
    proc = _publish_process(userspace, driver, started)
    _wait_started(proc, started)
    time.sleep(delay)
    alive = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return alive and started.exists() and not (driver / PUBLISHED_MANIFEST).exists()


def test_sigkill_mid_publish_then_rerun_matches_clean(userspace: Path, tmp_path: Path) -> None:
    # Make the publish long enough to be killed inside: a large firmware file.
    big = userspace / f"usr/lib/firmware/nvidia/{V}/gsp_big.bin"
    big.write_bytes(os.urandom(1 << 20) * 48)
    publish_driver_root(host(userspace, tmp_path / "clean2"), V, Runner())
    started, driver = tmp_path / "started", tmp_path / "driver"
    duration = _publish_duration(userspace, tmp_path / "timed", started)
    # Two kills in a row: inside a first publish, then inside the re-publish over the partial root it left.
    # Each must land (a kill after the publish ended proves nothing); the machine's load may move one out.
    for _attempt in range(10):
        shutil.rmtree(driver, ignore_errors=True)
        if all(_kill_mid_publish(userspace, driver, started, duration * f) for f in (0.3, 0.6)):
            break
    else:
        pytest.fail(f"no two kills in a row landed inside a publish of {duration:.3f} s in 10 attempts")
    publish_driver_root(host(userspace, driver), V, Runner())
    same_as_clean(driver, tmp_path / "clean2")


def test_version_mismatch_leaves_root_untouched(userspace: Path, tmp_path: Path) -> None:
    dr = tmp_path / "driver"
    publish_driver_root(host(userspace, dr), V, Runner())
    before = snapshot(dr)
    with pytest.raises(UserspaceError, match=rf"no library named lib\*\.so\.535\.309\.01.*found versions {V}"):
        publish_driver_root(host(userspace, dr), "535.309.01", Runner())
    assert snapshot(dr) == before


def _escaping_link(us: Path) -> None:
    (us / LIB / "nvidia/current/libcuda.so.595.91.07").unlink()
    os.symlink("/usr/lib/x86_64-linux-gnu/libc.so.6", us / LIB / "nvidia/current/libcuda.so.595.91.07")


def _loop(us: Path) -> None:
    os.symlink("libloop.so.595.91.07", us / LIB / "libloop.so.595.91.07")


def _no_soname(us: Path) -> None:
    # a core compute library must have one; an optional one without is published by name (docs/publish.md)
    shutil.copy(us / "usr/lib/nvidia/current/nvidia-smi", us / LIB / "libnvidia-ptxjitcompiler.so.595.91.07")


def _not_elf(us: Path) -> None:
    (us / LIB / "libnvidia-text.so.595.91.07").write_text("INPUT(-lfoo)\n")


BAD_INPUTS = {
    "escaping-absolute-link": (_escaping_link, r"resolves to /usr/lib/x86_64-linux-gnu/libc.so.6 inside USERSPACE_"),
    "symlink-loop": (_loop, "symlink loop"),
    "no-soname": (_no_soname, "has no DT_SONAME"),
    "not-elf": (_not_elf, "not an ELF file"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_a_clear_error_and_previous_root_intact(userspace: Path, tmp_path: Path, case: str) -> None:
    dr = tmp_path / "driver"
    publish_driver_root(host(userspace, dr), V, Runner())
    before = snapshot(dr)
    damage, message = BAD_INPUTS[case]
    damage(userspace)
    with pytest.raises(DriverContainerError, match=message) as info:
        publish_driver_root(host(userspace, dr), V, Runner())
    assert info.value.fix
    assert snapshot(dr) == before
    assert sorted(os.listdir(dr / ".driver-container")) == ["manifest.json"]  # no staging left behind


def test_unreadable_library(userspace: Path, tmp_path: Path) -> None:
    """Root reads anything; drop CAP_DAC_OVERRIDE/READ_SEARCH from the bounding set to see the error."""
    require(os.geteuid() == 0 and shutil.which("setpriv"), "root and setpriv (util-linux)")
    lib = userspace / LIB / "nvidia/current" / f"libnvidia-glcore.so.{V}"
    lib.chmod(0)
    code = (
        "import sys; from pathlib import Path; from driver_container.base.paths import HostPaths;"
        "from driver_container.runtime.runner import Runner;"
        "from driver_container.publish.publisher import publish_driver_root;"
        "from driver_container.base.errors import UserspaceError\ntry:\n"
        f" publish_driver_root(HostPaths(userspace_root=Path({str(userspace)!r}), "
        f"driver_root_override=Path({str(tmp_path / 'd')!r}), run_dir=Path({str(tmp_path / 'run')!r}), "
        f"procfs_root=Path('/nonexistent')), {V!r}, Runner())\n"
        "except UserspaceError as e:\n print(e.message); sys.exit(3)"
    )
    argv = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 3, done.stderr
    assert f"libnvidia-glcore.so.{V}: cannot read: Permission denied" in done.stdout


def test_driver_root_under_a_regular_file(userspace: Path, tmp_path: Path) -> None:
    (tmp_path / "run").write_text("not a directory")
    with pytest.raises(PublishError, match=r"run is a regular file, not a directory"):
        publish_driver_root(host(userspace, tmp_path / "run/nvidia/driver"), V, Runner())


def test_full_filesystem_keeps_previous_root(userspace: Path, tmp_path: Path) -> None:
    require(os.geteuid() == 0, "root (mount tmpfs)")
    dr = tmp_path / "small"
    dr.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(dr)], check=True)
    try:
        publish_driver_root(host(userspace, dr), V, Runner())
        before = snapshot(dr)
        (userspace / f"usr/lib/firmware/nvidia/{V}/gsp_huge.bin").write_bytes(b"\0" * (8 << 20))
        with pytest.raises(PublishError, match="No space left on device; the previous root is intact"):
            publish_driver_root(host(userspace, dr), V, Runner())
        assert snapshot(dr) == before
        assert sorted(os.listdir(dr / ".driver-container")) == ["manifest.json"]  # early copies removed too
    finally:
        subprocess.run(["umount", str(dr)], check=True)


def _fake_umount(tmp_path: Path, rc: int) -> Runner:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "umount"
    script.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/umount.calls\n' + (f"echo 'umount: {rc}' >&2\nexit {rc}\n"))
    script.chmod(0o755)
    return Runner(env={"PATH": f"{bindir}:{os.environ['PATH']}"})


@pytest.mark.parametrize("rc", [0, 32])
def test_leftover_mount_is_unmounted_or_clear_error(userspace: Path, tmp_path: Path, rc: int) -> None:
    dr = tmp_path / "run nvidia" / "driver"
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    escaped = str(dr).replace(" ", "\\040")
    (proc / "self/mountinfo").write_text(
        "22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        f"812 22 0:64 /run/nvidia/driver {escaped} rw,nosuid shared:420 - overlay overlay rw\n"
    )
    runner = _fake_umount(tmp_path, rc)
    if rc:
        with pytest.raises(PublishError, match="still a mount point") as info:
            publish_driver_root(host(userspace, dr, proc), V, runner)
        assert "umount -R" in (info.value.fix or "")
        assert not (dr / ".driver-container").exists()
    else:
        publish_driver_root(host(userspace, dr, proc), V, runner)
    assert (tmp_path / "umount.calls").read_text() == f"-R {dr}\n"
