"""Fixtures shared by the integration tests: a private copy of the synthetic 595.91.07 userspace, and each
real userspace published once per session by ``init --no-wait`` (tests/helpers/published_roots.py)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.apiserver import server, server_cert, tls_server  # noqa: F401  (fixtures: the loopback API)
from helpers.published_roots import Published, Userspace, publish_with_init
from helpers.support import FIXTURES, SYNTHETIC_VERSION, require

SYNTHETIC_USERSPACE = FIXTURES / "userspace" / f"debian-{SYNTHETIC_VERSION}"


@pytest.fixture
def userspace(tmp_path: Path) -> Path:
    """A copy of the synthetic userspace the test may change (tests/fixtures/userspace/build.sh)."""
    require(SYNTHETIC_USERSPACE.is_dir(), "synthetic userspace", how="tests/fixtures/userspace/build.sh")
    dest = tmp_path / "userspace"
    shutil.copytree(SYNTHETIC_USERSPACE, dest, symlinks=True)
    return dest


@pytest.fixture(scope="session")
def published_userspaces(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Userspace], Published]:
    """``get(userspace)``: that userspace published by ``init --no-wait`` on the re-stamped Talos host, once per
    session (test_init_real_userspaces.py and test_toolkit_real.py read the same roots). A test that changes
    a root puts it back before it ends."""
    done: dict[str, Published] = {}

    def get(userspace: Userspace) -> Published:
        if userspace.name not in done:
            done[userspace.name] = publish_with_init(userspace, tmp_path_factory.mktemp(userspace.name))
        return done[userspace.name]

    return get
