"""A stand-in for nvidia-persistenced: records its argv, creates its socket in its fixed runtime dir
(FAKE_PERSISTENCED_DIR stands for /var/run/nvidia-persistenced), removes it on SIGTERM like the real one.
FAKE_PERSISTENCED_MODE: normal | die (exit 3 at once) | die-later (exit 4 after 1 s) | ignore-term."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(" ".join(["nvidia-persistenced", *sys.argv[1:]]) + "\n")
mode = os.environ.get("FAKE_PERSISTENCED_MODE", "normal")
if mode == "die":
    sys.exit(3)
# A plain file: AF_UNIX paths are limited to 108 bytes, which deep test directories exceed.
socket_path = Path(os.environ["FAKE_PERSISTENCED_DIR"]) / "socket"
socket_path.write_text("")


def _term(_signum: int, _frame: object) -> None:
    socket_path.unlink(missing_ok=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "ignore-term" else _term)
if mode == "die-later":
    time.sleep(1)
    sys.exit(4)
while True:
    time.sleep(1)
