"""What a call costs: wall-clock seconds and peak Python allocation, for the tests that bound parser work."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable


def elapsed(call: Callable[[], object]) -> float:
    started = time.monotonic()
    call()
    return time.monotonic() - started


def peak_bytes(call: Callable[[], object]) -> int:
    """The most memory the call held at once, as tracemalloc counts Python allocations."""
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak
