"""runtime/signalcleanup.py in a child Python process (the signal ends it): the registered steps run at
the signal, newest first, a signal inside ``held`` waits for its end, and the process ends by the signal."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import os, signal, sys
from driver_container.runtime.signalcleanup import SignalCleanup
log = open(sys.argv[1], "a", buffering=1)
cleanup = SignalCleanup().install()
cleanup.add("first", lambda: log.write("undo first\\n"))
gone = cleanup.add("discarded", lambda: log.write("undo discarded\\n"))
cleanup.discard(gone)
cleanup.add("failing", lambda: 1 / 0)
cleanup.add("last", lambda: log.write("undo last\\n"))
with cleanup.held():
    os.kill(os.getpid(), int(sys.argv[2]))
    log.write("held: still running\\n")
log.write("not reached\\n")
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_steps_run_newest_first_after_held_and_the_process_ends_by_the_signal(
    tmp_path: Path, signum: signal.Signals
) -> None:
    log = tmp_path / "log"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(log), str(int(signum))],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == -signum, done.stderr
    assert log.read_text().splitlines() == ["held: still running", "undo last", "undo first"]
    assert "Traceback" not in done.stderr
