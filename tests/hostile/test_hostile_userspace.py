"""Hostile image userspace trees: ``init --no-wait`` writes nothing outside RUN_DIR (DRIVER_ROOT is
RUN_DIR/driver), reads nothing outside USERSPACE_ROOT, publishes no FIFO, device or setuid bit, and
never hangs. A refusal is fine when it is a clear error (exit 1, no traceback).

Every case starts from the healthy fixture pair and adds one hostile entry; the sentinel directory
``outside/`` holds a secret and a valid ELF library that an escaping link points at.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from elfdyn import build_dynamic_elf
from helpers.hostenv import Host, make_host
from helpers.rootcmp import root_state
from helpers.support import require
from helpers.trees import snapshot

VERSION = "595.91.07"
SECRET = b"SECRET: must never be read into the driver root\n"
FIRMWARE = f"usr/lib/firmware/nvidia/{VERSION}"
LIBDIR = "usr/lib/x86_64-linux-gnu"
REAL_LIB = f"{LIBDIR}/nvidia/current/libnvidia-glcore.so.{VERSION}"


def _outside(h: Host) -> Path:
    out = h.base / "outside"
    out.mkdir()
    (out / "secret").write_bytes(SECRET)
    # A valid NVIDIA-looking library: if an escaping link were followed, it would be selected.
    shutil.copy(h.userspace / REAL_LIB, out / f"libnvidia-evil.so.{VERSION}")
    return out


def _abs_symlink(h: Host, out: Path) -> None:
    (h.userspace / FIRMWARE / "gsp_evil.bin").symlink_to(out / "secret")


def _rel_symlink_config(h: Host, out: Path) -> None:
    icd = h.userspace / "etc/vulkan/icd.d/nvidia_icd.json"
    icd.unlink()
    icd.symlink_to("../../../" * 6 + "outside/secret")


def _escaping_library(h: Host, out: Path) -> None:
    (h.userspace / LIBDIR / f"libnvidia-evil.so.{VERSION}").symlink_to(
        "../" * 12 + f"outside/libnvidia-evil.so.{VERSION}"
    )
    (h.userspace / LIBDIR / f"libnvidia-abs.so.{VERSION}").symlink_to(out / f"libnvidia-evil.so.{VERSION}")


def _dotdot_names(h: Host, out: Path) -> None:
    for name in ("...", "..bin", "a..b", "..\n..", "$(touch x)"):
        (h.userspace / FIRMWARE / name).write_bytes(b"firmware " + name.encode())


def _hard_link(h: Host, out: Path) -> None:
    os.link(out / "secret", h.userspace / FIRMWARE / "gsp_hard.bin")


def _fifo_and_device(h: Host, out: Path) -> None:
    require(os.geteuid() == 0, "root (mknod)", how="run the suite as root")
    os.mkfifo(h.userspace / FIRMWARE / "gsp_fifo.bin")
    os.mknod(h.userspace / FIRMWARE / "gsp_null.bin", 0o644 | stat.S_IFCHR, os.makedev(1, 3))


def _fifo_binary(h: Host, out: Path) -> None:
    os.mkfifo(h.userspace / "usr/bin/nvidia-debugdump")  # opening it for reading would block forever


def _setuid(h: Host, out: Path) -> None:
    (h.userspace / FIRMWARE / "gsp_ga10x.bin").chmod(0o6755)
    (h.userspace / f"{LIBDIR}/nvidia/current/libcuda.so.{VERSION}").chmod(0o6755)
    (h.userspace / "usr/lib/nvidia/current/nvidia-smi").chmod(0o4755)


CASES: dict[str, Callable[[Host, Path], None]] = {
    "absolute-symlink-out": _abs_symlink,
    "relative-symlink-out": _rel_symlink_config,
    "escaping-library-links": _escaping_library,
    "dotdot-and-shell-names": _dotdot_names,
    "hard-link-to-outside": _hard_link,
    "fifo-and-device": _fifo_and_device,
    "fifo-binary": _fifo_binary,
    "setuid-files": _setuid,
}


# Entries the publish must drop silently or sanitise while publishing the rest ("setuid bits
# dropped, FIFOs/devices not published", docs/publish.md); for these a refusal would hide whether the sanitising works.
MUST_PUBLISH = {
    "setuid-files",
    "fifo-and-device",
    "hard-link-to-outside",
    "absolute-symlink-out",
    "dotdot-and-shell-names",
}


def check_driver_root(root: Path, *, outside: Path | None = None) -> None:
    """Nothing special, nothing setuid, nothing hard-linked, nothing with the secret in it.

    With ``outside``, a copy of the secret is allowed (a hard link in the image IS a file of the image:
    same inode, same filesystem), but never the outside inode itself.
    """
    outside_inode = os.stat(outside / "secret").st_ino if outside else None
    secret = hashlib.sha256(SECRET).hexdigest()
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            st = os.lstat(path)
            assert stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode), f"{path}: published a special file"
            assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), f"{path}: mode {oct(st.st_mode)} kept set-id"
            if stat.S_ISREG(st.st_mode):
                assert st.st_nlink == 1, f"{path}: hard link shared with another file"
                assert st.st_ino != outside_inode, f"{path}: is the outside file itself"
                if outside is None:
                    assert hashlib.sha256(path.read_bytes()).hexdigest() != secret, f"{path}: holds the outside secret"
                assert "evil" not in name, f"{path}: published a library from outside USERSPACE_ROOT"


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_userspace(tmp_path: Path, case: str) -> None:
    h = make_host(tmp_path / "h")
    out = _outside(h)
    CASES[case](h, out)
    before = snapshot(tmp_path, skip=(h.run_dir,))
    done = h.run("init", "--no-wait", timeout=90)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), done.stderr
    if case in MUST_PUBLISH:
        assert done.returncode == 0, done.stderr
        assert (h.driver_root / "lib/firmware/nvidia" / VERSION / "gsp_ga10x.bin").is_file()
    if done.returncode == 1:  # a refusal names what it refused
        assert "error" in done.stderr.lower() or "refus" in done.stderr.lower(), done.stderr
    assert snapshot(tmp_path, skip=(h.run_dir,)) == before, "wrote outside RUN_DIR/DRIVER_ROOT"
    check_driver_root(h.driver_root, outside=out if case == "hard-link-to-outside" else None)
    assert h.tool_calls() == []


def test_healthy_pair_publishes(tmp_path: Path) -> None:
    """The control: without a hostile entry the same pair publishes, so the checks above can fail."""
    h = make_host(tmp_path / "h")
    done = h.run("init", "--no-wait")
    assert done.returncode == 0, done.stderr
    assert (h.driver_root / f"{LIBDIR}/libcuda.so.{VERSION}").is_file()
    check_driver_root(h.driver_root)


# --- Crafted ELF headers: strings from PT_INTERP, DT_NEEDED, DT_SONAME and DT_RUNPATH are
# paths in the published root; none may reach outside it. ``victim`` beside RUN_DIR is a FILE: the
# escape once replaced it with an empty directory (ensure_dir walked '..' before anything was checked).

SMI = "usr/lib/nvidia/current/nvidia-smi"  # what usr/bin/nvidia-smi resolves to in the fixture image
ESCAPE = b"../" * 5 + b"victim/x"  # from usr/lib/<triplet>/ up to the test's base directory


def _victims(h: Host) -> None:
    (h.base / "victim").write_bytes(b"a file outside DRIVER_ROOT\n")
    inside = h.userspace / "victim"  # what the escaping names resolve to inside USERSPACE_ROOT
    inside.mkdir()
    shutil.copy(h.userspace / "lib64/ld-linux-x86-64.so.2", inside / "x")


def _smi(h: Host, **headers: object) -> None:
    smi = h.userspace / SMI
    smi.unlink()
    smi.write_bytes(build_dynamic_elf(**headers))  # type: ignore[arg-type]
    smi.chmod(0o755)


ML = b"libnvidia-ml.so.1"
LD = b"/lib64/ld-linux-x86-64.so.2"
ELF_CASES: dict[str, Callable[[Host], None]] = {
    "interp-dotdot": lambda h: _smi(h, interpreter=b"/../../victim/x", needed=(ML,)),
    "interp-4k": lambda h: _smi(h, interpreter=b"/" + b"a" * 4096, needed=(ML,)),
    "interp-nul": lambda h: _smi(h, interpreter=LD + b"\0/../../victim/x", needed=(ML,)),
    "needed-dotdot": lambda h: _smi(h, interpreter=LD, needed=(ML, ESCAPE)),
    "needed-absolute": lambda h: _smi(h, interpreter=LD, needed=(ML, b"/../../../../victim/x")),
    "needed-4k": lambda h: _smi(h, interpreter=LD, needed=(ML, b"lib" + b"n" * 4096 + b".so")),
    "runpath-dotdot": lambda h: _smi(h, interpreter=LD, needed=(ML, b"x"), runpath=b"/../../victim:../../victim"),
    "soname-dotdot": lambda h: _library(h, soname=ESCAPE),
    "soname-4k": lambda h: _library(h, soname=b"libnvidia-" + b"s" * 4096 + b".so.1"),
}


def _library(h: Host, *, soname: bytes) -> None:
    lib = h.userspace / LIBDIR / f"libnvidia-crafted.so.{VERSION}"
    lib.write_bytes(build_dynamic_elf(soname=soname, executable=False))


@pytest.mark.parametrize("case", sorted(ELF_CASES))
def test_crafted_elf_headers_never_reach_outside(tmp_path: Path, case: str) -> None:
    h = make_host(tmp_path / "h")
    _victims(h)
    ELF_CASES[case](h)
    before = snapshot(tmp_path, skip=(h.run_dir,))
    done = h.run("init", "--no-wait", timeout=10)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    assert snapshot(tmp_path, skip=(h.run_dir,)) == before, "wrote outside RUN_DIR/DRIVER_ROOT"
    if case == "interp-nul":  # read as ld.so reads it (up to the NUL): the real interpreter, published
        assert done.returncode == 0, done.stderr
    elif case == "runpath-dotdot":  # '..' stops at USERSPACE_ROOT: finds victim/x there, which is no library
        assert done.returncode == 1 and "nvidia-driver: error:" in done.stderr, done.stderr
    else:
        assert done.returncode == 1, done.stderr
        refused = ("'..'", "absolute", "long")
        assert "nvidia-driver: error:" in done.stderr and any(r in done.stderr for r in refused), done.stderr
    check_driver_root(h.driver_root)


# --- Special files where the scan looks: a FIFO once hung init (the early copier
# opened it blocking), a character device would have copied without end into /run.

SCANNED = {
    "libdir": f"{LIBDIR}/libnvidia-special.so.{VERSION}",
    "nvidia-current": f"{LIBDIR}/nvidia/current/libnvidia-special.so.{VERSION}",
    "bin": "usr/bin/nvidia-debugdump",
    "firmware": f"{FIRMWARE}/gsp_special.bin",
    "config": "etc/vulkan/icd.d/nvidia_icd.json",
    "egl-dir": "usr/share/egl/egl_external_platform.d/10_nvidia_special.json",
    "ldconfig": "sbin/ldconfig.real",
}


def _special(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        cwd = os.getcwd()
        os.chdir(path.parent)  # sun_path holds 108 bytes; the temporary directories are deeper than that
        try:
            sock.bind(path.name)
        finally:
            os.chdir(cwd)
            sock.close()
    else:
        os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero: endless


@pytest.mark.parametrize("kind", ["fifo", "socket", "zero-device"])
@pytest.mark.parametrize("where", sorted(SCANNED))
def test_special_files_in_scanned_directories(tmp_path: Path, where: str, kind: str) -> None:
    require(os.geteuid() == 0 or kind != "zero-device", "root (mknod)", how="run the suite as root")
    h = make_host(tmp_path / "h")
    _special(h.userspace / SCANNED[where], kind)
    before = snapshot(tmp_path, skip=(h.run_dir,))
    started = time.monotonic()
    done = h.run("init", "--no-wait", timeout=10)
    assert time.monotonic() - started < 10
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), done.stderr
    if done.returncode == 1:
        assert "not a regular file" in done.stderr or "cannot read" in done.stderr, done.stderr
    assert snapshot(tmp_path, skip=(h.run_dir,)) == before
    check_driver_root(h.driver_root)


# --- A previous root with symlinked directories and a damaged manifest.


def test_symlinked_directories_of_a_previous_root_are_never_followed(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    assert h.run("init", "--no-wait").returncode == 0
    out = tmp_path / "prev-outside"
    for name in ("lib", "state"):
        (out / name).mkdir(parents=True)
        (out / name / f".libcuda.so.{VERSION}.k1ll3d.dc-tmp").write_bytes(b"not ours")
        (out / name / ".manifest.json.k1ll3d.tmp").write_bytes(b"not ours")
    (out / "lib" / f"libcuda.so.{VERSION}").write_bytes(b"not ours")
    (out / "state/manifest.json").write_text((h.driver_root / ".driver-container/manifest.json").read_text())
    libdir = h.driver_root / LIBDIR
    shutil.rmtree(libdir)
    libdir.symlink_to(out / "lib")
    shutil.rmtree(h.driver_root / ".driver-container")
    (h.driver_root / ".driver-container").symlink_to(out / "state")
    before = snapshot(tmp_path, skip=(h.run_dir,))
    done = h.run("init", "--no-wait", timeout=10)
    assert done.returncode == 0, done.stderr
    assert snapshot(tmp_path, skip=(h.run_dir,)) == before, "followed a symlinked directory of the previous root"
    assert libdir.is_dir() and not libdir.is_symlink()
    assert (libdir / f"libcuda.so.{VERSION}").read_bytes() == (h.userspace / REAL_LIB).parent.joinpath(
        f"libcuda.so.{VERSION}"
    ).read_bytes()


MANIFEST = ".driver-container/manifest.json"


def _edit(manifest: Path, change: Callable[[dict[str, object]], dict[str, object]]) -> None:
    body = json.loads(manifest.read_text())
    body["files"] = [change(r) if i == 0 else r for i, r in enumerate(body["files"])]
    manifest.write_text(json.dumps(body))


def _relink(manifest: Path, target: Path) -> None:
    if target.name != "zero":
        target.write_text(manifest.read_text())
    manifest.unlink()
    manifest.symlink_to(target)


DAMAGED: dict[str, Callable[[Path, Path], None]] = {
    "non-utf8": lambda m, _o: m.write_bytes(b'{"format": 1, "files": [\xff\xfe]}'),
    "record-names-a-directory": lambda m, _o: _edit(m, lambda r: {**r, "path": LIBDIR}),
    "wrong-types": lambda m, _o: _edit(m, lambda r: {**r, "size": "big", "elf": [1]}),
    "dotdot-record": lambda m, _o: _edit(m, lambda r: {**r, "path": "../../victim"}),
    "huge": lambda m, _o: m.write_bytes(b" " * (17 << 20) + m.read_bytes()),
    "symlink-to-outside": _relink,
    "symlink-to-zero": lambda m, _o: _relink(m, Path("/dev/zero")),
    "a-directory": lambda m, _o: (m.unlink(), m.mkdir()),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_damaged_manifest_is_treated_as_absent(tmp_path: Path, case: str) -> None:
    h = make_host(tmp_path / "h")
    assert h.run("init", "--no-wait").returncode == 0
    clean = root_state(h.driver_root)
    (h.base / "victim").mkdir()
    (h.base / "victim/keep").write_text("outside")
    DAMAGED[case](h.driver_root / MANIFEST, tmp_path / "outside-manifest.json")
    before = snapshot(tmp_path, skip=(h.run_dir,))
    done = h.run("init", "--no-wait", timeout=10)
    assert done.returncode == 0, done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "manifest" in done.stderr  # the warning names it
    assert root_state(h.driver_root) == clean
    assert snapshot(tmp_path, skip=(h.run_dir,)) == before
    status = h.run("status", "--json", timeout=10)
    assert "Traceback" not in status.stderr


# --- SIGTERM at any time (docs/init.md: honoured within 2 s at every stage, a stuck copy included).


def _terminate_after(h: Host, delay: float) -> float:
    proc = h.start("init", "--no-wait")
    time.sleep(delay)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    return time.monotonic() - sent


def test_sigterm_during_a_stuck_read_exits_within_2s(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    os.mkfifo(h.userspace / LIBDIR / f"libnvidia-fifo.so.{VERSION}")  # once opened blocking: init hung
    assert _terminate_after(h, 1.0) < 2.0
    again = h.run("init", "--no-wait", timeout=10)  # the pid lock went with the terminated init
    assert again.returncode == 1 and "already running" not in again.stderr, again.stderr
    assert "not a regular file" in again.stderr, again.stderr


@pytest.mark.parametrize("delay", [0.05, 0.15, 0.25, 0.35, 0.45, 0.6, 0.8])
def test_sigterm_at_any_point_exits_within_2s_and_the_root_converges(tmp_path: Path, delay: float) -> None:
    h = make_host(tmp_path / "h")
    clean = h.run("init", "--no-wait", RUN_DIR=str(h.base / "clean-run"))
    assert clean.returncode == 0, clean.stderr
    assert _terminate_after(h, delay) < 2.0
    assert not (h.driver_root / ".driver-container/journal.json").exists()  # rolled back on the way out
    again = h.run("init", "--no-wait")
    assert again.returncode == 0, again.stderr
    assert root_state(h.driver_root) == root_state(h.base / "clean-run/driver")
