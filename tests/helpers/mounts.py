"""Real mounts for tests that need what the kernel enforces (noexec, nodev, propagation), not a mount
table that says so: a tmpfs with Talos's /run flags (siderolabs/talos internal/pkg/mount/v3/helpers.go
``PseudoLate``, commit ad8823176e75b9cd07647ddde13c34f2ab77c663: nosuid,nodev,noexec). Needs root: a
failure under CI=true, a skip elsewhere (helpers/support.require)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from driver_container.runtime.runner import CompletedCommand, Runner
from helpers.support import require

TALOS_RUN_OPTIONS = "noexec,nosuid,nodev,mode=0755"


def _mount(*argv: str) -> None:
    subprocess.run(["mount", *argv], check=True, capture_output=True, timeout=30)


@contextmanager
def tmpfs(
    path: Path, options: str = TALOS_RUN_OPTIONS, *, shared: bool = True, source: str = "talos-run"
) -> Iterator[Path]:
    """A tmpfs at ``path`` (made if needed) for the duration; shared like Talos's /run under the kubelet's
    Bidirectional hostPath unless ``shared`` is False. Unmounted (with what was mounted below) after."""
    require(os.geteuid() == 0 and shutil.which("mount"), "root and mount(8) (a real noexec tmpfs)")
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", options, source, str(path))
    try:
        _mount("--make-shared" if shared else "--make-private", str(path))
        yield path
    finally:
        subprocess.run(["umount", "-R", str(path)], check=False, capture_output=True, timeout=30)


@contextmanager
def pseudo_mount(path: Path, fstype: str) -> Iterator[Path]:
    """A fresh procfs or sysfs at ``path`` (made if needed), read-only, for the duration."""
    require(os.geteuid() == 0 and shutil.which("mount"), f"root and mount(8) (a real {fstype})")
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", fstype, "-o", "ro,nosuid,nodev,noexec", f"test-{fstype}", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False, capture_output=True, timeout=30)


class MountRunner(Runner):
    """Records every argv and the directory its working directory names (``cwd`` is OWN_PROCFS_ROOT/self/fd/N,
    a descriptor of this process: read through the real /proc here); answers ``returncode`` with ``stderr``
    (mount(8)'s EPERM wording by default). Mounts nothing."""

    def __init__(self, returncode: int = 0, stderr: str = "") -> None:
        super().__init__()
        self.argvs: list[list[str]] = []
        self.dirs: list[str | None] = []
        self.returncode, self.stderr = returncode, stderr

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float = 120.0,
        check: bool = True,
        stdin: str | None = None,
        cwd: str | None = None,
    ) -> CompletedCommand:
        self.argvs.append(list(argv))
        self.dirs.append(None if cwd is None else os.readlink(f"/proc/self/fd/{cwd.rsplit('/', 1)[1]}"))
        return CompletedCommand(tuple(argv), self.returncode, "", self.stderr)
