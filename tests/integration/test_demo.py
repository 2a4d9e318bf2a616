"""``bash scripts/demo.sh`` (the README's first command) as a reader runs it: a clean first publish on its
simulated Talos node, and the ``nvidia-driver status`` line it prints at the end, run as printed.

The demo completes private copies of its fixture host and userspace (the firmware kernel argument, the
device majors, no optional library without its dependency), so a warning in its output can only come from
the code, never from a gap in the fixture. As root (device nodes are made with mknod).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers.support import FIXTURES, REPO, require
from helpers.trees import snapshot

DEMO = REPO / "scripts" / "demo.sh"
HOST = FIXTURES / "hosts" / "talos-1.13-open-595"
USERSPACE = FIXTURES / "userspace" / "debian-595.91.07"
STATUS_HEADING = "== what status reports on this host"
RUN_TIMEOUT_S = 120  # the demo takes well under a second; this bounds a hang, not the speed

pytestmark = pytest.mark.root


def _run_demo(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    require(os.geteuid() == 0, "root (init makes the device nodes with mknod)", how="run the tests as root")
    require((REPO / ".venv/bin/nvidia-driver").is_file(), "the development .venv")
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # PYTHONPATH kept: a worktree's demo runs that tree's code
    return subprocess.run(
        ["bash", str(DEMO)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def _status_line(stdout: str) -> str:
    lines = stdout.splitlines()
    heading = next(i for i, line in enumerate(lines) if line.startswith(STATUS_HEADING))
    return lines[heading + 1]


def test_demo_warns_of_nothing_and_prints_a_status_command_that_runs(tmp_path: Path) -> None:
    fixtures_before = (snapshot(HOST), snapshot(USERSPACE))
    demo = _run_demo(tmp_path)
    output = demo.stdout + demo.stderr
    assert demo.returncode == 0, output
    assert [line for line in output.splitlines() if " WARNING " in line or " ERROR " in line] == []
    assert "device nodes in" in output and "0 not permitted" in output  # the step ran, it was not skipped
    assert "firmware search path already" in output
    assert (snapshot(HOST), snapshot(USERSPACE)) == fixtures_before  # only private copies were completed

    line = _status_line(demo.stdout)
    assert line.startswith("env ") and line.endswith(" status"), line
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    status = subprocess.run(
        ["sh", "-c", line + " --json"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert status.returncode == 0, status.stdout + status.stderr
    doc = json.loads(status.stdout)
    assert doc["platform"]["talos_version"] == "v1.13.9"
    assert doc["driver_root"]["published"] is True, doc["driver_root"]
    assert [f["code"] for f in doc["findings"] if f["severity"] != "info"] == []


def test_the_printed_status_command_survives_a_tmpdir_with_blanks_and_quotes(tmp_path: Path) -> None:
    """The printed line is for a reader to paste into sh: a TMPDIR with a blank and a quote must still run."""
    awkward = tmp_path / "a dir's name"
    awkward.mkdir()
    demo = _run_demo(awkward)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    status = subprocess.run(
        ["sh", "-c", _status_line(demo.stdout)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert status.returncode == 0, status.stdout + status.stderr
    assert "findings: none" in status.stdout, status.stdout
    assert str(awkward) in status.stdout  # the paths reached status whole, not split at the blank
