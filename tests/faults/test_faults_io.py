"""ENOSPC and EACCES in the middle of a re-publish: exit 1 with a clear error naming the problem, the
previous root exactly as it was (manifest, every file), no staged leftovers; once the cause is gone, the
next init succeeds."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.hostenv import Host, make_host
from helpers.rootcmp import leftovers, root_state
from helpers.support import require

FIRMWARE = "usr/lib/firmware/nvidia/595.91.07"


@pytest.fixture
def tmpfs_run(tmp_path: Path) -> Iterator[Host]:
    """RUN_DIR on a 2 MiB tmpfs: room for the fixture root (~0.5 MiB), not for a 4 MiB firmware file."""
    require(os.geteuid() == 0 and shutil.which("mount"), "root and mount(8)", how="run the suite as root")
    h = make_host(tmp_path / "h")
    h.run_dir.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(h.run_dir)], check=False)
    require(mounted.returncode == 0, "permission to mount tmpfs", how="run the suite as root outside a container")
    try:
        yield h
    finally:
        subprocess.run(["umount", "-l", str(h.run_dir)], check=False)


def test_enospc_keeps_previous_root(tmpfs_run: Host) -> None:
    h = tmpfs_run
    first = h.run("init", "--no-wait")
    assert first.returncode == 0, first.stderr
    before = root_state(h.driver_root)
    (h.userspace / FIRMWARE / "gsp_big.bin").write_bytes(os.urandom(4 << 20))
    full = h.run("init", "--no-wait")
    assert full.returncode == 1, full.stderr
    assert "No space left on device" in full.stderr, full.stderr
    assert "Traceback" not in full.stderr
    assert root_state(h.driver_root) == before
    assert leftovers(h.driver_root) == []
    (h.userspace / FIRMWARE / "gsp_big.bin").unlink()
    again = h.run("init", "--no-wait")
    assert again.returncode == 0, again.stderr
    assert root_state(h.driver_root) == before


def test_eacces_without_dac_override_keeps_previous_root(tmp_path: Path) -> None:
    require(os.geteuid() == 0 and shutil.which("setpriv"), "root and setpriv(1)", how="apt-get install util-linux")
    h = make_host(tmp_path / "h")
    assert h.run("init", "--no-wait").returncode == 0
    published_fw = h.driver_root / "lib/firmware/nvidia/595.91.07"
    published_fw.chmod(0o555)
    before = root_state(h.driver_root)
    (h.userspace / FIRMWARE / "gsp_new.bin").write_bytes(b"new firmware\n")
    # Root without CAP_DAC_OVERRIDE/CAP_FOWNER (as under a restrictive pod securityContext): a 0555
    # directory is read-only to it.
    argv = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--", *h.argv("init", "--no-wait")]
    denied = subprocess.run(argv, env=h.env, cwd=h.base, capture_output=True, text=True, timeout=120, check=False)
    assert denied.returncode == 1, denied.stderr
    assert "Permission denied" in denied.stderr and "Traceback" not in denied.stderr, denied.stderr
    assert root_state(h.driver_root) == before
    assert leftovers(h.driver_root) == []
    published_fw.chmod(0o755)
    again = h.run("init", "--no-wait")
    assert again.returncode == 0, again.stderr
    assert (published_fw / "gsp_new.bin").read_bytes() == b"new firmware\n"
