"""A disposable copy of a fixture host plus the image userspace, and ``nvidia-driver`` run on it as a
real process. Shared by tests/hostile and tests/faults.

The module tools on PATH are fakes that record their argv NUL-separated (so a value with spaces or
newlines is recorded exactly as the kernel would receive it) and never run a shell on the values.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from fakes import fixture_host_env, install_recording_tools, recorded_calls
from support import FIXTURES

HOSTS = FIXTURES / "hosts"
USERSPACE = FIXTURES / "userspace" / "debian-595.91.07"
# The healthy Talos 1.13 host with the open 595 modules loaded (issue 9 names it talos-1.13-open-healthy).
SCENARIO = next(s for s in ("talos-1.13-open-healthy", "talos-1.13-open-595") if (HOSTS / s).is_dir())
MODULE_TOOLS = ("modprobe", "rmmod", "insmod")


@dataclass
class Host:
    base: Path
    root: Path
    userspace: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        return Path(self.env["RUN_DIR"])

    @property
    def driver_root(self) -> Path:
        return self.run_dir / "driver"

    @property
    def calls(self) -> Path:
        return self.base / "calls.log"

    def tool_calls(self) -> list[list[str]]:
        """argv of every module-tool call, exactly as received."""
        return recorded_calls(self.calls)

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "driver_container", *args]

    def run(self, *args: str, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args), env={**self.env, **extra}, cwd=self.base,
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def start(self, *args: str, **extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args), env={**self.env, **extra}, cwd=self.base,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip


def make_host(base: Path, scenario: str = SCENARIO, userspace: Path = USERSPACE) -> Host:
    """Copy ``scenario`` and ``userspace`` under ``base``; DRIVER_ROOT is RUN_DIR/driver."""
    base.mkdir(parents=True, exist_ok=True)
    root = base / "host-tree"
    shutil.copytree(HOSTS / scenario, root, symlinks=True)
    image = base / "userspace"
    shutil.copytree(userspace, image, symlinks=True)
    host = Host(base, root, image)
    install_recording_tools(base / "bin", host.calls)
    env = fixture_host_env(root, base, image, drop=("DRIVER_ROOT", "CI"))
    host.env = env
    return host


Entry = tuple[str, int, int, str]  # (kind, mode, nlink, content digest or link target)


def snapshot(top: Path, *, skip: tuple[Path, ...] = (), nlink: bool = True) -> dict[str, Entry]:
    """Every entry below ``top`` (not following links): type, mode, link count and content."""
    found: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        for name in [*dirnames, *filenames]:
            path = here / name
            if path in skip:
                continue
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                content = hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                content = os.readlink(path)
            else:
                content = ""
            kind = stat.S_IFMT(st.st_mode)
            links = st.st_nlink if nlink and not stat.S_ISDIR(st.st_mode) else 0
            found[str(path.relative_to(top))] = (oct(kind), stat.S_IMODE(st.st_mode), links, content)
    return found
