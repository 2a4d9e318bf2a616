from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.support import NODE_FIXTURES

from driver_container.base.paths import HostPaths


@pytest.fixture
def node_host(tmp_path: Path) -> Callable[[str], HostPaths]:
    """A writable copy of one scenario, with DRIVER_ROOT and RUN_DIR inside tmp_path."""

    def make(scenario: str) -> HostPaths:
        root = tmp_path / scenario
        shutil.copytree(NODE_FIXTURES / scenario, root)
        for sub in ("host", "proc", "sys"):
            (root / sub).mkdir(exist_ok=True)
        return HostPaths(
            host_root=root / "host",
            procfs_root=root / "proc",
            sysfs_root=root / "sys",
            run_dir=tmp_path / "run",
            driver_root_override=tmp_path / "run" / "driver",
            host_driver_root_override=Path("/run/nvidia/driver"),
        )

    return make
