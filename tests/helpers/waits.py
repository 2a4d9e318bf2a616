"""Bounded polling for tests that watch another process (every test bounded in time)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``predicate`` every 50 ms; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
