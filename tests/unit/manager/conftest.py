from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.support import fixture_paths
from manager_support import FIXTURES, Node

from driver_container.runtime.runner import Runner


@pytest.fixture
def node(tmp_path: Path, request: pytest.FixtureRequest) -> Node:
    """A copy of the fixture scenario named by the test's ``scenario`` parameter/marker."""
    scenario: str = request.param
    root = tmp_path / scenario
    shutil.copytree(FIXTURES / scenario, root, symlinks=True)
    run = root / "run"
    run.mkdir(exist_ok=True)
    mountinfo = root / "proc/self/mountinfo"
    mountinfo.write_text(mountinfo.read_text().replace("@RUN_DIR@", str(run)))
    # A recording umount on PATH; the runner finds tools by name, so this is the one it runs.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "umount.log"
    (bin_dir / "umount").write_text(f'#!/bin/sh\necho "umount $*" >> {log}\n')
    (bin_dir / "umount").chmod(0o755)
    paths = fixture_paths(root, run=run, userspace=root / "image")
    return Node(root, paths, Runner(env={"PATH": str(bin_dir)}), log)
