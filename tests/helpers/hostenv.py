"""A disposable copy of a fixture host plus the image userspace, and ``nvidia-driver`` run on it as a
real process (tests/hostile, tests/faults, tests/property, tests/integration, bench/run_all.py).

The module tools on PATH are fakes that record their argv NUL-separated (so a value with spaces or
newlines is recorded exactly as the kernel would receive it) and never run a shell on the values.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from helpers.fakes import fixture_host_env, install_recording_tools, recorded_calls
from helpers.support import FIXTURES

HOSTS = FIXTURES / "hosts"
USERSPACE = FIXTURES / "userspace" / "debian-595.91.07"
# The healthy Talos 1.13 host with the open 595 modules loaded (once named talos-1.13-open-healthy).
SCENARIO = next(s for s in ("talos-1.13-open-healthy", "talos-1.13-open-595") if (HOSTS / s).is_dir())
MODULE_TOOLS = ("modprobe", "rmmod", "insmod")


@dataclass
class Host:
    """A copy of a fixture host (``root``) and of an image userspace (``userspace``, USERSPACE_ROOT) under
    ``base``, with the recording module tools and the fake daemons of helpers.fakes first on PATH."""

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

    def status(self) -> str | None:
        """The status file's word (Ready, NotReady), None until init has written it."""
        path = self.run_dir / "validations/.driver-daemons-status"
        return path.read_text() if path.exists() else None

    # The fabric fakes' view (helpers.fakes.fabric_env, add_fabric_to_image), on the hosts given them.
    @property
    def fabric_run(self) -> Path:
        return Path(self.env["FABRICMANAGER_RUN_DIR"])

    @property
    def fake(self) -> Path:
        return Path(self.env["FAKE_DIR"])

    def log(self) -> list[str]:
        """The fake daemons' and nvidia-smi's log lines (their argv), in order."""
        path = Path(self.env["FAKE_LOG"])
        return path.read_text().splitlines() if path.exists() else []

    def daemon_lines(self) -> list[str]:
        return [line for line in self.log() if not line.startswith("nvidia-smi")]

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "driver_container", *args]

    def run(self, *args: str, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args),
            env={**self.env, **extra},
            cwd=self.base,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, *args: str, **extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args),
            env={**self.env, **extra},
            cwd=self.base,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


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
