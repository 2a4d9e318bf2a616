"""The ``fake_host`` fixture: fake modprobe/rmmod/modinfo on a copy of a fixture host (tests/helpers/fakes.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.fakes import FakeHost, make_fake_host

__all__ = ["FakeHost", "fake_host"]


@pytest.fixture
def fake_host(tmp_path: Path) -> Callable[..., FakeHost]:
    """``fake_host(scenario, version="580.105.08", forbidden=frozenset())`` -> FakeHost on a fresh copy."""

    def make(scenario: str, *, version: str = "580.105.08", forbidden: frozenset[str] = frozenset()) -> FakeHost:
        return make_fake_host(tmp_path, scenario, version=version, forbidden=forbidden)

    return make
