"""bench/fuzz.py runs every target time-bounded, with atheris and with its hypothesis fallback."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time

import pytest
from helpers.fuzz_targets import TARGETS
from helpers.support import REPO, require

FUZZ = REPO / "bench" / "fuzz.py"
# Run the script with atheris made unimportable, as on a Python without its wheel.
NO_ATHERIS = (
    "import runpy, sys; sys.modules['atheris'] = None; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def _run(*args: str, via: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, *(via or []), str(FUZZ), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=REPO)


def test_lists_every_target() -> None:
    done = _run("--list")
    assert done.returncode == 0
    assert done.stdout.split()[1:] == sorted(TARGETS)


def test_unknown_target_is_a_usage_error() -> None:
    done = _run("nope")
    assert done.returncode == 2 and "unknown target 'nope'" in done.stderr


def test_fallback_loop_without_atheris() -> None:
    """The random loop keeps the time bound: it stops within a batch of it (a batch of 10 000 examples ran
    ~20 s past a 1 s bound)."""
    started = time.monotonic()
    done = _run("os_release", "-max_total_time=1", via=["-c", NO_ATHERIS])
    assert time.monotonic() - started < 12
    assert done.returncode == 0, done.stderr
    assert "falling back to a hypothesis-driven random loop" in done.stderr
    assert "no crash" in done.stderr


@pytest.mark.parametrize("name", ["module", "ld_cache"])
def test_atheris_run_is_time_bounded(name: str) -> None:
    require(importlib.util.find_spec("atheris"), "atheris", how="pip install -e '.[fuzz]'")
    done = _run(name, "-max_total_time=2")
    # libFuzzer's progress lines (NEW, REDUCE, pulse) would hide the reason (crash, out-of-memory, timeout).
    verdict = [line for line in done.stderr.splitlines() if not line.startswith("#")][-25:]
    assert done.returncode == 0, (done.returncode, verdict)
    assert "Done" in done.stderr and "crash-" not in done.stderr
