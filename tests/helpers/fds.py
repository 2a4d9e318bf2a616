"""File-descriptor exhaustion for the tests that prove an I/O error is reported as one, never as a missing
file (tests/unit/inspect, tests/unit/driverroot)."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_free_descriptor() -> Iterator[None]:
    """RLIMIT_NOFILE's soft limit at the lowest free descriptor number: every open(2) fails with EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    probe = os.open(os.devnull, os.O_RDONLY)
    os.close(probe)
    resource.setrlimit(resource.RLIMIT_NOFILE, (probe, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
