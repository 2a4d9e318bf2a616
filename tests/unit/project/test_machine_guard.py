"""The machine guard (helpers/machine_guard.py, loaded for every test by tests/conftest.py) fails a test
that writes outside its temporary directories: proven on planted tests in a pytest session of their own
(so their failures are asserted here, not suffered), and its rules on their own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.machine_guard import REPO, SNAPSHOT_ROOTS_ENV, guard_roots
from helpers.writeguard import is_allowed, written_paths

from driver_container.base.paths import HostPaths
from driver_container.formats.kernel.sysfs import FIRMWARE_PATH_PARAM

# Each plant aims at a path that cannot be written on any machine (procfs makes no new files): even a
# broken guard leaves nothing behind. The snapshot's plant writes a temporary root the session is told
# to watch in place of the production ones (SNAPSHOT_ROOTS_ENV).
PLANTED = """
import os, subprocess, sys

def test_opens_proc_sys_for_writing():
    try:
        open("/proc/sys/kernel/guard-plant", "w")
    except OSError:
        pass  # swallowed, as code under test may: the guard fails the test anyway

def test_mounts_outside():
    try:
        subprocess.run(["mount", "--bind", "/tmp", "/proc/sys/guard-plant-mount"], check=False)
    except OSError:
        pass

def test_a_python_child_writes():
    subprocess.run([sys.executable, "-c", "open('/proc/sys/kernel/guard-plant-child', 'w')"], check=False)

def test_a_shell_child_writes_a_watched_root():
    subprocess.run(["sh", "-c", 'echo x > "$WATCHED/nvidia-driver.log"'], check=True)

def test_writes_only_its_tmp_path(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "nvidia-driver.log").write_text("ok")
    os.rename(tmp_path / "run", tmp_path / "run2")
"""


def test_the_guard_fails_each_planted_write_and_passes_the_clean_test(tmp_path: Path) -> None:
    (tmp_path / "planted").mkdir()
    (tmp_path / "planted/test_planted.py").write_text(PLANTED)
    watched = tmp_path / "watched"
    watched.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "WRITE_GUARD"))}
    env.update(PYTHONPATH=str(REPO / "tests"), WATCHED=str(watched), **{SNAPSHOT_ROOTS_ENV: str(watched)})
    argv = [sys.executable, "-m", "pytest", "-p", "helpers.machine_guard", "-p", "no:cacheprovider", "-rfE"]
    done = subprocess.run(
        # its own basetemp: the planted session never sweeps (or warns about) the outer session's temp dirs
        [
            *argv,
            "--basetemp",
            str(tmp_path / "inner-tmp"),
            "--rootdir",
            str(tmp_path / "planted"),
            str(tmp_path / "planted"),
        ],
        cwd=tmp_path / "planted",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    # failed, not errors at teardown: each in its own call
    assert re.search(r"= 4 failed, 1 passed(, \d+ warnings?)? in ", out), out
    assert "refused open /proc/sys/kernel/guard-plant" in out
    assert "refused subprocess.Popen /proc/sys/guard-plant-mount" in out
    assert "refused in a child: " in out and "open /proc/sys/kernel/guard-plant-child" in out
    assert f"changed {watched / 'nvidia-driver.log'} (a production root, {watched})" in out
    assert "test_writes_only_its_tmp_path" not in out.split("short test summary info")[-1]


def test_the_production_defaults_and_the_repository_are_forbidden(request: pytest.FixtureRequest) -> None:
    roots = guard_roots(request.config)
    defaults = HostPaths()
    for path in (defaults.run_dir / "driver/x", defaults.sysfs_root / FIRMWARE_PATH_PARAM, Path("/proc/sys/kernel/x")):
        assert not is_allowed(str(path), roots), path
    for path in (Path("/etc/passwd"), REPO / "tests/fixtures/hosts/x", REPO / "driver_container/x.py"):
        assert not is_allowed(str(path), roots), path
    assert is_allowed("/dev/null", roots) and is_allowed(str(REPO / ".coverage.host.1.x"), roots)
    assert not is_allowed(str(REPO / ".coverage/x"), roots) and not is_allowed(str(REPO / "README.md"), roots)
    assert not is_allowed("/tmp/x", ["/tmp", "-/tmp/x"])  # forbidden beats allowed


@pytest.mark.parametrize(
    ("event", "args", "written"),
    [
        ("open", ("/run/nvidia/x", "w", 0), ["/run/nvidia/x"]),
        ("open", ("/run/nvidia/x", "r", os.O_RDONLY), []),
        ("open", ("/run/nvidia/x", None, os.O_WRONLY | os.O_CREAT), ["/run/nvidia/x"]),
        ("open", ("relative", None, os.O_WRONLY), []),  # the event does not say its dir_fd
        ("open", (3, "w", 0), []),
        ("os.mkdir", ("/run/nvidia/../nvidia", 0o755, -1), ["/run/nvidia"]),
        ("os.rename", ("/tmp/a", "/etc/b", -1, -1), ["/tmp/a", "/etc/b"]),
        ("os.symlink", ("/etc", "/run/l", -1), ["/run/l"]),
        ("os.remove", ("/etc/x", -1), ["/etc/x"]),
        ("subprocess.Popen", ("umount", ["umount", "-R", "/run/nvidia/driver"], None, None), ["/run/nvidia/driver"]),
        ("subprocess.Popen", ("ls", ["ls", "/run/nvidia"], None, None), []),
        # the mount code starts mount(8) in the directory it checked, with the target ".": the guard judges
        # that directory (a /proc/self/fd/N link resolved), not its own working directory
        (
            "subprocess.Popen",
            ("mount", ["mount", "-t", "tmpfs", "x", "."], "/run/nvidia/driver", None),
            ["/run/nvidia/driver"],
        ),
        ("subprocess.Popen", ("mount", ["mount", "x", "."], "/proc/self/root/run", None), ["/run"]),
        ("os.listdir", ("/etc",), []),
    ],
)
def test_which_events_write_where(event: str, args: tuple[object, ...], written: list[str]) -> None:
    assert written_paths(event, args) == written
