"""run_in_child with a Shutdown: a termination signal ends a child stuck in a read within 2 s."""

from __future__ import annotations

import os
import signal
import threading
import time

from driver_container.runtime.supervise import Shutdown, run_in_child


def test_sigterm_kills_a_stuck_child_and_returns_at_once() -> None:
    read_fd, write_fd = os.pipe()  # nothing is ever written: the child blocks in read(2) for ever

    def stuck() -> bytes:
        return os.read(read_fd, 1)

    shutdown = Shutdown().install()
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        started = time.monotonic()
        timer.start()
        assert run_in_child(stuck, shutdown) is None
        assert time.monotonic() - started < 2.0
        assert shutdown.requested
    finally:
        timer.cancel()
        shutdown.restore()
        os.close(read_fd)
        os.close(write_fd)


def test_without_a_signal_the_result_comes_back() -> None:
    shutdown = Shutdown().install()
    try:
        assert run_in_child(lambda: "published", shutdown) == "published"
    finally:
        shutdown.restore()
