"""A publish whose checks fail after the plan (a good root, then a publish whose
ld.so.cache check fails while nvidia-smi, firmware and links were being replaced): exit 1, the previous
root byte-identical (files, links, cache, manifest, inodes), and ``status`` saying which version is
published and that the last publish failed. A failed first publish leaves nothing that claims to be
published."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

from helpers.hostenv import Host, make_host
from helpers.rootcmp import leftovers
from helpers.support import require
from helpers.trees import snapshot

VERSION = "595.91.07"
FIRMWARE = f"usr/lib/firmware/nvidia/{VERSION}"
# What `ldconfig -r ROOT [-C CACHE]` does here: writes a cache with no entry (as a broken ldconfig did).
BROKEN_LDCONFIG = """#!/bin/sh
root=""; cache=""
while [ $# -gt 0 ]; do
  case "$1" in -r) root="$2"; shift;; -C) cache="$2"; shift;; esac
  shift
done
[ -n "$cache" ] || cache=/etc/ld.so.cache
printf 'glibc-ld.so.cache1.1' > "$root$cache"
"""


def _with_static_ldconfig(h: Host) -> None:
    """The image's own static ldconfig is published (sbin/ldconfig.real), so the one run from PATH can be
    replaced by a broken one without changing what is published."""
    real = shutil.which("ldconfig") or "/sbin/ldconfig"
    require(Path(real).exists(), "a static ldconfig", how="apt-get install libc-bin")
    (h.userspace / "sbin").mkdir(exist_ok=True)
    shutil.copy(real, h.userspace / "sbin/ldconfig.real")


def _break_ldconfig(h: Host) -> None:
    fake = h.base / "bin/ldconfig"
    fake.write_text(BROKEN_LDCONFIG)
    fake.chmod(0o755)


def _inodes(root: Path) -> dict[str, tuple[int, int]]:
    """Inode and mtime of every file and link (a directory's mtime changes with its entries, and back)."""
    found = {}
    for path in root.rglob("*"):
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            found[str(path.relative_to(root))] = (st.st_ino, st.st_mtime_ns)
    return found


def _status(h: Host) -> tuple[int, dict[str, object], list[str]]:
    done = h.run("status", "--json")
    assert "Traceback" not in done.stderr, done.stderr
    doc = json.loads(done.stdout)
    return done.returncode, doc["driver_root"], [f["code"] for f in doc["findings"]]


def test_failed_cache_check_after_files_changed_restores_the_previous_root(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    _with_static_ldconfig(h)
    first = h.run("init", "--no-wait")
    assert first.returncode == 0, first.stderr
    before, inodes = snapshot(h.driver_root), _inodes(h.driver_root)
    assert ".driver-container/manifest.json" in before and "etc/ld.so.cache" in before
    # A new image: nvidia-smi and a firmware file changed, one firmware file gone, one new.
    smi = h.userspace / "usr/lib/nvidia/current/nvidia-smi"
    smi.write_bytes(smi.read_bytes() + b"\0new build")
    (h.userspace / FIRMWARE / "gsp_ga10x.bin").write_bytes(b"new firmware")
    (h.userspace / FIRMWARE / "gsp_tu10x.bin").unlink()
    (h.userspace / FIRMWARE / "gsp_new.bin").write_bytes(b"another")
    _break_ldconfig(h)
    failed = h.run("init", "--no-wait", timeout=60)
    assert failed.returncode == 1, failed.stderr
    assert snapshot(h.driver_root) == before  # files, links, cache, manifest: content, mode, link count
    assert _inodes(h.driver_root) == inodes  # the very same files, not copies
    assert leftovers(h.driver_root) == []
    assert "does not resolve the published libraries" in failed.stderr and "previous root is restored" in failed.stderr
    assert "Traceback" not in failed.stderr
    code, root, codes = _status(h)
    assert (root["published"], root["version"], root["last_publish_failed"]) == (True, VERSION, True)
    assert "LAST_PUBLISH_FAILED" in codes and code == 1
    text = h.run("status").stdout
    assert f"published {VERSION}; the last publish failed" in text
    (h.base / "bin/ldconfig").unlink()
    again = h.run("init", "--no-wait")
    assert again.returncode == 0, again.stderr
    assert (h.driver_root / "lib/firmware/nvidia" / VERSION / "gsp_new.bin").read_bytes() == b"another"
    assert "LAST_PUBLISH_FAILED" not in _status(h)[2]


def test_failed_first_publish_leaves_nothing_published(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    _with_static_ldconfig(h)
    _break_ldconfig(h)
    failed = h.run("init", "--no-wait", timeout=60)
    assert failed.returncode == 1, failed.stderr
    assert os.listdir(h.driver_root) == []  # DRIVER_ROOT itself is kept: operands bind-mount it
    _code, root, codes = _status(h)
    assert (root["published"], root["version"], root["last_publish_failed"]) == (False, None, True)
    assert "LAST_PUBLISH_FAILED" in codes and "DRIVER_ROOT_NOT_PUBLISHED" in codes


def test_failure_in_the_middle_of_the_commit_restores_the_previous_root(tmp_path: Path) -> None:
    """usr/bin read-only to a publisher without CAP_DAC_OVERRIDE: the step for etc/vulkan (first in
    path order) runs, the one for usr/bin/nvidia-smi fails; every step is undone."""
    h = make_host(tmp_path / "h")
    assert h.run("init", "--no-wait").returncode == 0
    before = snapshot(h.driver_root)
    target = h.driver_root / "usr/bin"
    mode = stat.S_IMODE(target.stat().st_mode)
    smi = h.userspace / "usr/lib/nvidia/current/nvidia-smi"
    smi.write_bytes(smi.read_bytes() + b"\0new")
    (h.userspace / "etc/vulkan/icd.d/nvidia_icd.json").write_text('{"new": true}\n')
    require(os.geteuid() == 0 and shutil.which("setpriv"), "root and setpriv(1)", how="apt-get install util-linux")
    target.chmod(0o555)
    try:
        caps = "-dac_override,-dac_read_search,-fowner"
        argv = ["setpriv", "--bounding-set", caps, "--", *h.argv("init", "--no-wait")]
        denied = subprocess.run(argv, env=h.env, cwd=h.base, capture_output=True, text=True, timeout=60, check=False)
    finally:
        target.chmod(mode)
    assert denied.returncode == 1, denied.stderr
    assert "Permission denied" in denied.stderr and "Traceback" not in denied.stderr, denied.stderr
    assert snapshot(h.driver_root) == before
    assert leftovers(h.driver_root) == []
