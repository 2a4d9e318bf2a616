"""One monotonic deadline shared by the steps of a bounded command.

``status --verify`` proves the published root (an exec of its static ldconfig) and then hashes it; each
step had its own 10 s, so the command took up to 20 s. A ``Deadline`` is made once, at the start, and
passed down: every step takes what is left of it (``left()``), none starts a clock of its own. The clock is
a parameter so a test can drive it; by default ``time.monotonic`` (not moved by a wall-clock change).
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Deadline:
    """``seconds`` from now on ``clock``; ``left()`` never goes below 0."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self.started = clock()
        self.end = self.started + seconds

    def left(self) -> float:
        return max(self.end - self._clock(), 0.0)

    def elapsed(self) -> float:
        return self._clock() - self.started

    @property
    def expired(self) -> bool:
        return self._clock() >= self.end
