"""SIGKILL ``init --no-wait`` at >= 30 random points of a publish; the rerun must produce exactly the
root a clean publish produces (manifest and sha256 of every file), with no staged leftovers.

The publish itself is a few tens of ms of a ~0.4 s run, so a clean run first measures when DRIVER_ROOT
appears and when the manifest is written; a quarter of the kills land in that window (timed from the
moment DRIVER_ROOT appears, re-measured as the machine's load changes), the others anywhere in the
run. Seeded (FAULT_SEED, printed on failure) so a failing point can be replayed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from dataclasses import dataclass

import pytest
from helpers.hostenv import Host, make_host
from helpers.rootcmp import MANIFEST, leftovers, root_state

KILL_POINTS = int(os.environ.get("FAULT_KILL_POINTS", "32"))
SEED = int(os.environ.get("FAULT_SEED", str(random.SystemRandom().randrange(1 << 30))))


@dataclass
class Timeline:
    root_s: float  # DRIVER_ROOT appears: the publish starts
    manifest_s: float  # the manifest is written: the publish ends
    exit_s: float


def _timed_run(h: Host, fresh: bool) -> Timeline:
    if fresh:
        shutil.rmtree(h.run_dir, ignore_errors=True)
    started = time.monotonic()
    proc = h.start("init", "--no-wait")
    root_s = manifest_s = 0.0
    while proc.poll() is None:
        now = time.monotonic() - started
        if not root_s and h.driver_root.exists():
            root_s = now
        if not manifest_s and (h.driver_root / MANIFEST).exists():
            manifest_s = now
        time.sleep(0.002)
    _out, err = proc.communicate()
    assert proc.returncode == 0, err
    exit_s = time.monotonic() - started
    return Timeline(root_s or exit_s, manifest_s or exit_s, exit_s)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Host, tuple[object, object]]:
    h = make_host(tmp_path_factory.mktemp("kill") / "h")
    done = h.run("init", "--no-wait", RUN_DIR=str(h.base / "clean-run"))
    assert done.returncode == 0, done.stderr
    return h, root_state(h.base / "clean-run/driver")


def _kill_after(h: Host, delay: float, *, in_publish: bool = False) -> bool:
    """Start init, SIGKILL it after ``delay`` s (counted from the moment DRIVER_ROOT appears when
    ``in_publish``); True when it was still running (a real kill)."""
    proc = h.start("init", "--no-wait")
    while in_publish and proc.poll() is None and not h.driver_root.exists():
        time.sleep(0.001)
    time.sleep(delay)
    alive = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    return alive


def _diff(got: tuple[object, object], want: tuple[object, object]) -> str:
    files_got, files_want = got[1], want[1]
    assert isinstance(files_got, dict) and isinstance(files_want, dict)
    keys = sorted(k for k in files_got.keys() | files_want.keys() if files_got.get(k) != files_want.get(k))
    lines = [f"{k}: {files_got.get(k)} != clean {files_want.get(k)}" for k in keys[:20]]
    if got[0] != want[0]:
        lines.append("manifest differs")
    return "\n".join(lines)


def test_sigkill_at_random_points_then_rerun_is_identical(clean: tuple[Host, tuple[object, object]]) -> None:
    h, expected = clean
    rng = random.Random(SEED)
    timeline = _timed_run(h, fresh=True)
    killed = partial = point = interrupted = 0
    while killed < KILL_POINTS:
        assert point < 3 * KILL_POINTS, f"only {killed} kills hit a running init in {point} points (seed {SEED})"
        fresh = point % 2 == 0
        if fresh:
            shutil.rmtree(h.run_dir, ignore_errors=True)  # a first publish, not only re-publishes
        elif point % 4 == 1 and h.driver_root.is_dir():
            # Make the re-publish rewrite something: drop a published firmware file.
            victim = next(iter(sorted((h.driver_root / "lib/firmware").rglob("*.bin"))), None)
            if victim is not None:
                victim.unlink()
        aimed = fresh and point % 4 == 0  # inside the publish: from DRIVER_ROOT's creation to the manifest
        delay = rng.uniform(0, timeline.manifest_s - timeline.root_s) if aimed else rng.uniform(0.02, timeline.exit_s)
        for _ in range(rng.randint(1, 2)):  # sometimes two kills in a row on the same partial root
            killed += _kill_after(h, delay, in_publish=aimed)
        if fresh:
            partial += _is_partial(h, expected)
        context = f"seed {SEED}, point {point}, delay {delay:.3f} s"
        interrupted += _status_is_truthful(h, context)
        done = h.run("init", "--no-wait")
        assert done.returncode == 0, f"{context}: rerun failed:\n{done.stderr}"
        got = root_state(h.driver_root)
        assert got == expected, f"{context}: rerun differs from a clean publish:\n{_diff(got, expected)}"
        assert leftovers(h.driver_root) == [], context
        assert not (h.run_dir / "nvidia-driver.pid").exists(), context
        point += 1
        if point % 8 == 0:
            timeline = _timed_run(h, fresh=True)  # follow the machine's load
    assert partial >= 2, f"only {partial} kills left a partial root: the delays miss the publish (seed {SEED})"


def _status_is_truthful(h: Host, context: str) -> bool:
    """After a kill: a journal left means `status` says the publish was interrupted; without a manifest it
    says nothing is published. True when the kill landed inside a commit."""
    journal = (h.driver_root / ".driver-container/journal.json").exists()
    manifest = (h.driver_root / MANIFEST).is_file()
    if not journal and manifest:
        return False  # the common case; skip the status run
    done = h.run("status", "--json")
    assert "Traceback" not in done.stderr, f"{context}: {done.stderr}"
    doc = json.loads(done.stdout)
    codes = {f["code"] for f in doc["findings"]}
    assert doc["driver_root"]["interrupted"] is journal, context
    assert ("PUBLISH_INTERRUPTED" in codes) is journal, context
    if not manifest:
        assert doc["driver_root"]["published"] is False, context
    return journal


def _is_partial(h: Host, expected: tuple[object, object]) -> bool:
    try:
        return root_state(h.driver_root) != expected
    except (OSError, ValueError):
        return h.driver_root.exists()  # no manifest yet, or a torn one: killed inside the publish
