"""A stand-in for nvidia-smi: ``-q`` prints FAKE_GPUS GPU sections whose Fabric block shows
FAKE_DIR/fabric-state (written by the fake Fabric Manager; "Not Started" before it), ``-r`` resets nothing.
Every call is recorded in FAKE_LOG as "nvidia-smi <args>". The layout is nvidia-smi -q's: a "GPU <bus id>"
header, four-space indented blocks, "Key : Value" lines (NVIDIA Fabric Manager User Guide)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(" ".join(["nvidia-smi", *sys.argv[1:]]) + "\n")
if sys.argv[1:] != ["-q"]:
    sys.exit(0)
state_file = Path(os.environ["FAKE_DIR"]) / "fabric-state"
state = state_file.read_text() if state_file.exists() else "Not Started"
status = os.environ.get("FAKE_FABRIC_STATUS", "Success") if state == "Completed" else "N/A"
print("\n==============NVSMI LOG==============\n")
print("Driver Version                            : 595.91.07")
for index in range(int(os.environ.get("FAKE_GPUS", "8"))):
    print(f"\nGPU 00000000:{0x18 + index:02X}:00.0")
    print("    Product Name                          : NVIDIA H100 80GB HBM3")
    print("    Fabric")
    print(f"        State                             : {state}")
    print(f"        Status                            : {status}")
    print("        CliqueId                          : N/A")
    print("    Processes                             : None")
