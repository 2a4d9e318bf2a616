"""Run NVIDIA's real userspace binaries (nvidia-smi, nvidia-persistenced, published copies) in tests.

Run as root, libnvidia-ml creates the device nodes it misses (/dev/nvidiactl c 195:255, /dev/nvidia0...)
in whatever /dev it sees; a test run once left /dev/nvidiactl on the build machine. So every
such command runs in a private mount namespace (``unshare -m``; util-linux makes its mounts private)
with a fresh tmpfs on /dev holding only null, zero, urandom and tty: whatever the binary creates there
vanishes with the namespace. A chroot inside sees the root's own /dev (under the test's tmp dir).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from helpers.support import require

# Character devices (major, minor) of a minimal /dev (Documentation/admin-guide/devices.txt).
_BASIC_NODES = {"null": (1, 3), "zero": (1, 5), "urandom": (1, 9), "tty": (5, 0)}
_SETUP = (
    "mount -t tmpfs -o mode=755,nosuid tmpfs /dev && "
    + " && ".join(f"mknod -m 666 /dev/{name} c {major} {minor}" for name, (major, minor) in _BASIC_NODES.items())
    + ' && exec "$@"'
)


def sandboxed(argv: Sequence[str]) -> list[str]:
    """``argv`` wrapped to run with a private, throw-away /dev."""
    return ["unshare", "-m", "sh", "-c", _SETUP, "sh", *argv]


def run_nvidia(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """subprocess.run of an NVIDIA binary as root without touching the host's /dev."""
    require(os.geteuid() == 0, "root (unshare -m, mount)")
    require(shutil.which("unshare"), "util-linux unshare", how="apt-get install util-linux")
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("check", False)
    kwargs.setdefault("timeout", 120)
    env = kwargs.pop("env", None)
    if env is not None:
        # Only the NVIDIA binary gets the environment (an LD_PRELOAD must not load into mount or sh).
        argv = ["env", "-i", *(f"{key}={value}" for key, value in env.items()), *argv]
    return subprocess.run(sandboxed(argv), **kwargs)  # noqa: PLW1510 - check is set above
