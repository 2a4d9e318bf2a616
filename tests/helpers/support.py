"""Where the real artefacts and the fixture trees live, and how a missing prerequisite is reported.

Under CI=true a missing prerequisite is a test FAILURE, never a silent skip (DEVELOPERS.md); on a
developer machine it is a skip that says which set-up step provides it.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from driver_container.base.paths import HostPaths

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
# docs/ pages whose shell and YAML snippets users copy: the walk-throughs and the operator reference pages
# split off operator.md (tests/unit/project/test_manifests.py, test_manifest_schemas.py check their snippets).
ROUTE_AND_REFERENCE_PAGES = (
    "operator.md",
    "standalone.md",
    "migration.md",
    "upgrades.md",
    "manager.md",
    "dra.md",
    "mig.md",
    "mps.md",
    "imex.md",
)
SYNTHETIC_VERSION = "595.91.07"  # tests/fixtures/userspace/debian-595.91.07 (build.sh)
MODULES = FIXTURES / "modules"  # the kbuild-built module fixtures and the script that made them
NODE_FIXTURES = FIXTURES / "node"  # /proc, /sys and host trees of GPU nodes (device nodes, firmware, peermem)
MANAGER_FIXTURES = FIXTURES / "manager"  # driver-manager scenarios (README.md there)
ARTEFACTS = Path(os.environ.get("ARTEFACTS_DIR", REPO / ".cache" / "artefacts"))
IN_CI = os.environ.get("CI", "").lower() == "true"


def require(condition: object, what: str, *, how: str = "run scripts/setup.sh") -> None:
    """Skip (developer) or fail (CI) when a prerequisite is missing."""
    if condition:
        return
    message = f"missing prerequisite: {what} ({how})"
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def fixture_paths(tree: Path, run: Path | None = None, userspace: Path | None = None) -> HostPaths:
    """HostPaths for a fixture host tree (host/, proc/, sys/, userspace/, drivers/, run/)."""
    from driver_container.base.paths import HostPaths

    return HostPaths(
        host_root=tree / "host",
        procfs_root=tree / "proc",
        sysfs_root=tree / "sys",
        userspace_root=userspace or tree / "userspace",
        drivers_conf_dir=tree / "drivers",
        run_dir=run or tree / "run",
        host_os_release_override=tree / "host/etc/os-release",
    )


def require_module(name: str, *, how: str = "pip install -e '.[test]'") -> ModuleType:
    """``import name`` as a prerequisite: a skip on a developer machine, a failure under CI=true
    (``pytest.importorskip`` would skip silently in CI too)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        message = f"missing prerequisite: Python module {name!r} ({how})"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message, allow_module_level=True)
