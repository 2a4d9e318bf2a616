"""``status`` and ``init --no-wait`` as processes on fixture hosts whose kernel and daemon files hold
Unicode digits or random bytes: exit 0 or 1 with one-line errors, never a traceback (docs/publish.md, hostile input).

Each case rewrites one file of a copied healthy Talos host: a number in /proc/modules, "Device Minor"
of a GPU, a module's refcnt, /proc/devices, and the host's nvidia-persistenced pid file.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.hostenv import Host, make_host

from driver_container.node.persistenced import HOST_PID_FILE

Edit = Callable[[Host], None]


def _replace(rel: str, old: str, new: str) -> Edit:
    def edit(h: Host) -> None:
        path = h.root / rel
        text = path.read_text()
        assert old in text, (rel, old)
        path.write_text(text.replace(old, new, 1))

    return edit


def _write(rel: str, data: bytes) -> Edit:
    def edit(h: Host) -> None:
        path = h.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    return edit


GPU_INFO = "proc/driver/nvidia/gpus/0000:01:00.0/information"
FILES = ("proc/modules", GPU_INFO, "sys/module/nvidia/refcnt", "proc/devices", f"host/{HOST_PID_FILE}")
CASES: dict[str, Edit] = {
    "modules-size": _replace("proc/modules", "nvidia 14376960", "nvidia 1437696²"),
    "modules-refcnt": _replace("proc/modules", "nvidia 14376960 82", "nvidia 14376960 ٨٢"),
    "device-minor": _replace(GPU_INFO, "Device Minor: \t 0", "Device Minor: \t ²"),
    "sysfs-refcnt": _write("sys/module/nvidia/refcnt", "١\n".encode()),
    "proc-devices": _write("proc/devices", "Character devices:\n²95 nvidia-frontend\n５1 nvidia-uvm\n".encode()),
    "persistenced-pid": _write(f"host/{HOST_PID_FILE}", "²\n".encode()),
    "huge-number": _replace("proc/modules", "nvidia 14376960", "nvidia " + "9" * 5000),
}
for seed in range(3):
    rng = random.Random(seed)
    for rel in FILES:
        CASES[f"random-{seed}-{rel.rsplit('/', 1)[-1]}"] = _write(rel, rng.randbytes(rng.randrange(1, 4096)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_status_and_init_never_print_a_traceback(tmp_path: Path, case: str) -> None:
    h = make_host(tmp_path / "h")
    CASES[case](h)
    for args in (("status",), ("init", "--no-wait")):
        done = h.run(*args, timeout=60)
        text = done.stdout + done.stderr
        assert "Traceback" not in text, f"{case}: {args}:\n{text}"
        assert "internal error" not in text, f"{case}: {args}: an unexpected exception:\n{text}"
        assert done.returncode in (0, 1), f"{case}: {args}: exit {done.returncode}\n{text}"
        if done.returncode == 1 and args[0] == "init":
            assert "nvidia-driver: error: " in done.stderr, text
