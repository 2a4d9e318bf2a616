"""A stand-in for nv-fabricmanager and nvlsm (chosen by the name it is installed under).

Records its argv in FAKE_LOG (verbatim) and "<name> stopped" on SIGTERM.
- nvlsm: writes its --pid_file and the FM<->NVLSM socket FAKE_FABRIC_RUN_DIR/fm_sm_ipc.socket (a plain
  file: AF_UNIX paths are limited to 108 bytes), removes both on SIGTERM.
- nv-fabricmanager: copies the config it was given (-c) to FAKE_DIR/fm-config-seen.cfg; with
  --fm-sm-mgmt-port-guid it exits 5 unless NVLSM's socket exists (so the start order is observable);
  creates FM_CMD_UNIX_SOCKET_PATH; after FAKE_FABRIC_DELAY seconds writes "Completed" to
  FAKE_DIR/fabric-state, which the fake nvidia-smi reports (FAKE_FABRIC_STATUS: its Status, default Success).
FAKE_FM_MODE / FAKE_NVLSM_MODE: normal | die (exit 3 at once) | die-later (exit 4 after 1 s) | ignore-term.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

name = os.path.basename(sys.argv[0])
args = sys.argv[1:]
fake_dir = Path(os.environ["FAKE_DIR"])
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(" ".join(sys.argv) + "\n")  # argv verbatim: the path init ran
mode = os.environ.get("FAKE_FM_MODE" if name == "nv-fabricmanager" else "FAKE_NVLSM_MODE", "normal")
if mode == "die":
    print(f"{name}: fatal: cannot open the NVSwitch devices", file=sys.stderr)
    sys.exit(3)


def _arg(flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


cleanup: list[Path] = []
sm_socket = Path(os.environ["FAKE_FABRIC_RUN_DIR"]) / "fm_sm_ipc.socket"
if name == "nvlsm":
    pid_file = Path(_arg("--pid_file") or fake_dir / "nvlsm.pid")
    pid_file.write_text(f"{os.getpid()}\n")
    sm_socket.write_text("")
    cleanup += [pid_file, sm_socket]
else:
    config = Path(_arg("-c") or "")
    text = config.read_text()
    (fake_dir / "fm-config-seen.cfg").write_text(text)
    if _arg("--fm-sm-mgmt-port-guid") is not None and not sm_socket.exists():
        print("nv-fabricmanager: NVLSM is not running", file=sys.stderr)
        sys.exit(5)
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    if fields.get("FM_CMD_UNIX_SOCKET_PATH"):
        socket = Path(fields["FM_CMD_UNIX_SOCKET_PATH"])
        socket.write_text("")
        cleanup.append(socket)


def _term(_signum: int, _frame: object) -> None:
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(f"{name} stopped\n")
    for path in cleanup:
        path.unlink(missing_ok=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "ignore-term" else _term)
if name == "nv-fabricmanager":
    time.sleep(float(os.environ.get("FAKE_FABRIC_DELAY", "0")))
    (fake_dir / "fabric-state").write_text("Completed")
if mode == "die-later":
    time.sleep(1)
    print(f"{name}: fatal: lost the fabric", file=sys.stderr)
    sys.exit(4)
while True:
    time.sleep(1)
