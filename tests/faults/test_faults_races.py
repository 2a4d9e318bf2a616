"""Concurrent init, status and driver-manager on one RUN_DIR, and host files changing while init verifies.

Concurrency: every init either publishes or refuses with "already running"; nothing crashes; the root
left behind is exactly a clean publish. Changing host: /proc and /sys flip between the healthy 595 host
and a 580 host (atomic symlink swaps every few ms); init must exit 0 with the clean 595 root or exit 1
with a clear error, never crash or publish a mixed root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from hostenv import HOSTS, Host, make_host
from rootcmp import leftovers, root_state

MANAGER = "import sys; from driver_container.cli.manager_cmd import main; main(sys.argv[1:])"


def _clean_state(h: Host) -> tuple[object, object]:
    done = h.run("init", "--no-wait", RUN_DIR=str(h.base / "clean-run"))
    assert done.returncode == 0, done.stderr
    return root_state(h.base / "clean-run/driver")


def test_concurrent_init_status_and_driver_manager(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    expected = _clean_state(h)
    manager_env = {**h.env, "NODE_NAME": "node-1", "KUBECONFIG": str(tmp_path / "missing-kubeconfig")}
    for round_ in range(3):
        procs = [h.start("init", "--no-wait") for _ in range(3)] + [h.start("status") for _ in range(2)]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", MANAGER, "uninstall_driver"],
                env=manager_env,
                cwd=h.base,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        results = [(p, *p.communicate(timeout=120)) for p in procs]
        for proc, out, err in results:
            assert "Traceback" not in out + err, f"round {round_}, {proc.args!r}:\n{err}"
        inits = results[:3]
        ok = [r for r in inits if r[0].returncode == 0]
        for proc, _out, err in inits:
            assert proc.returncode == 0 or "already running" in err, f"round {round_}: {err}"
        assert ok, f"round {round_}: no init published"
        for proc, _out, _err in results[3:5]:
            assert proc.returncode in (0, 1), proc.args
    assert not (h.run_dir / "nvidia-driver.pid").exists()
    assert root_state(h.driver_root) == expected
    assert leftovers(h.driver_root) == []


def _flipper(links: list[tuple[Path, Path, Path]], stop: threading.Event) -> None:
    flip = False
    while not stop.is_set():
        flip = not flip
        for link, a, b in links:
            tmp = link.with_name(link.name + ".new")
            tmp.symlink_to(b if flip else a)
            os.replace(tmp, link)  # rename(2): readers see the old or the new tree, never none
        time.sleep(0.003)


def test_host_files_changing_during_verification(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    expected = _clean_state(h)
    other = tmp_path / "580"
    shutil.copytree(HOSTS / "talos-1.13-lts-580-vs-595", other, symlinks=True)
    links = []
    for kind in ("proc", "sys"):
        real = h.root / kind
        os.rename(real, h.root / f"{kind}-595")
        (h.root / kind).symlink_to(h.root / f"{kind}-595")
        links.append((h.root / kind, h.root / f"{kind}-595", other / kind))
    outcomes: dict[int, int] = {}
    stop = threading.Event()
    thread = threading.Thread(target=_flipper, args=(links, stop), daemon=True)
    thread.start()
    try:
        for attempt in range(8):
            done = h.run("init", "--no-wait", timeout=120)
            outcomes[done.returncode] = outcomes.get(done.returncode, 0) + 1
            assert "Traceback" not in done.stderr, done.stderr
            assert done.returncode in (0, 1), done.stderr
            if done.returncode == 1:
                assert "580.178.04" in done.stderr or "error" in done.stderr.lower(), f"{attempt}: {done.stderr}"
            elif h.driver_root.is_dir():
                assert root_state(h.driver_root) == expected, f"attempt {attempt}: mixed root"
    finally:
        stop.set()
        thread.join()
    assert sum(outcomes.values()) == 8
