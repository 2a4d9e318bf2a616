"""SIGKILL ``init --no-wait`` at >= 30 random points of a publish; the rerun must produce exactly the
root a clean publish produces (manifest and sha256 of every file), with no staged leftovers.

Seeded (FAULT_SEED, printed on failure) so a failing point can be replayed.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time

import pytest
from hostenv import Host, make_host
from rootcmp import leftovers, root_state

KILL_POINTS = int(os.environ.get("FAULT_KILL_POINTS", "32"))
SEED = int(os.environ.get("FAULT_SEED", str(random.SystemRandom().randrange(1 << 30))))


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Host, tuple[object, object], float]:
    h = make_host(tmp_path_factory.mktemp("kill") / "h")
    started = time.monotonic()
    done = h.run("init", "--no-wait", RUN_DIR=str(h.base / "clean-run"))
    duration = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    return h, root_state(h.base / "clean-run/driver"), duration


def _kill_after(h: Host, delay: float) -> bool:
    """Start init, SIGKILL it after ``delay`` s; True when it was still running (a real kill)."""
    proc = h.start("init", "--no-wait")
    time.sleep(delay)
    alive = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    return alive


def test_sigkill_at_random_points_then_rerun_is_identical(clean: tuple[Host, tuple[object, object], float]) -> None:
    h, expected, duration = clean
    rng = random.Random(SEED)
    killed = partial = 0
    for point in range(KILL_POINTS):
        if point % 3 == 0:
            shutil.rmtree(h.run_dir, ignore_errors=True)  # a first publish, not only re-publishes
        elif point % 3 == 1 and h.driver_root.is_dir():
            # Make the re-publish rewrite something: drop a published file, touch the manifest's view.
            victim = next(iter(sorted((h.driver_root / "lib/firmware").rglob("*.bin"))), None)
            if victim is not None:
                victim.unlink()
        # Half the points aim at the publish itself (the last part of the run, after verification).
        delay = rng.uniform(0.05, duration * 1.1) if point % 2 else rng.uniform(duration * 0.5, duration)
        for _ in range(rng.randint(1, 2)):  # sometimes two kills in a row on the same partial root
            killed += _kill_after(h, delay)
        partial += point % 3 == 0 and _is_partial(h, expected)  # fresh root: partial = killed mid-publish
        done = h.run("init", "--no-wait")
        context = f"seed {SEED}, point {point}, delay {delay:.3f} s"
        assert done.returncode == 0, f"{context}: rerun failed:\n{done.stderr}"
        assert root_state(h.driver_root) == expected, f"{context}: rerun differs from a clean publish"
        assert leftovers(h.driver_root) == [], context
        assert not (h.run_dir / "nvidia-driver.pid").exists(), context
    assert killed >= 30, f"only {killed} kills hit a running init (seed {SEED})"
    assert partial >= 2, f"only {partial} kills left a partial root: the delays miss the publish (seed {SEED})"


def _is_partial(h: Host, expected: tuple[object, object]) -> bool:
    try:
        return root_state(h.driver_root) != expected
    except (OSError, ValueError):
        return h.driver_root.exists()  # no manifest yet, or a torn one: killed inside the publish
