"""A termination signal at any stage of ``init`` ends it within 2 s, and nothing after
that stage starts (no nvidia-persistenced, no ``Ready``). ``run_init`` runs in this process on a copied
fixture host; the signal is sent from inside a stage (wrapping the stage function), so it lands exactly
there instead of racing a timer against the stage.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.support import FIXTURES, fixture_paths

from driver_container.base.paths import HostPaths
from driver_container.lifecycle import init as lifecycle
from driver_container.lifecycle import publishing
from driver_container.lifecycle.init import InitOptions, run_init
from driver_container.runtime import statusfiles
from driver_container.runtime.runner import Runner
from driver_container.settings import Settings

USERSPACE = FIXTURES / "userspace" / "debian-595.91.07"
SETTINGS = Settings(driver_version="595.91.07", kernel_module_type="open", persistenced="false")


def _host(tmp_path: Path) -> HostPaths:
    tree = tmp_path / "host-tree"
    shutil.copytree(FIXTURES / "hosts/talos-1.13-open-595", tree, symlinks=True)
    return fixture_paths(tree, run=tmp_path / "run", userspace=USERSPACE)


def _sigterm_after(func: Callable[..., object]) -> Callable[..., object]:
    def wrapped(*args: object, **kwargs: object) -> object:
        result = func(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        return result

    return wrapped


def _init(paths: HostPaths, tmp_path: Path) -> float:
    started = time.monotonic()
    run_init(paths, SETTINGS, Runner(), InitOptions(persistenced_runtime_dir=tmp_path / "pd", poll_s=0.05))
    return time.monotonic() - started


def _record(calls: list[str], name: str, func: Callable[..., object]) -> Callable[..., object]:
    def wrapped(*args: object, **kwargs: object) -> object:
        calls.append(name)
        return func(*args, **kwargs)

    return wrapped


@pytest.mark.parametrize("stage", ["detect", "wait_for_modules", "check_host", "_publish", "_node_steps"])
def test_signal_after_a_stage_starts_nothing_later(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str) -> None:
    paths = _host(tmp_path)
    calls: list[str] = []
    owner = publishing if stage in ("check_host", "_publish") else lifecycle  # both are publishing's
    monkeypatch.setattr(owner, stage, _sigterm_after(getattr(owner, stage)))
    for later in ("_node_steps", "_start_daemons", "_publish"):
        if later != stage:
            where = publishing if later == "_publish" else lifecycle
            monkeypatch.setattr(where, later, _record(calls, later, getattr(where, later)))
    if stage == "_publish":
        # The signal is sent from the publishing child to the parent: the parent lets it finish or kills it.
        parent = os.getpid()

        def publish_then_signal(*args: object) -> str:
            os.kill(parent, signal.SIGTERM)
            return "595.91.07"

        monkeypatch.setattr(publishing, stage, publish_then_signal)
    elapsed = _init(paths, tmp_path)
    assert elapsed < 10
    assert "_start_daemons" not in calls, "a daemon was started after the signal"
    if stage != "_node_steps":
        assert "_node_steps" not in calls
    if stage in ("detect", "wait_for_modules", "check_host"):
        assert "_publish" not in calls, "a publishing child was started after the signal"
    assert statusfiles.read_daemons_status(paths.run) == statusfiles.NOT_READY
    assert not paths.pid_file.exists()


def test_signal_during_the_daemon_start_writes_no_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _host(tmp_path)
    monkeypatch.setattr(lifecycle, "_start_daemons", _sigterm_after(lambda *a: None))
    _init(paths, tmp_path)
    assert statusfiles.read_daemons_status(paths.run) == statusfiles.NOT_READY
    assert statusfiles.read_state(paths) is None


def test_signal_ends_a_stuck_publishing_child_within_2_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child ignores signals; one stuck (a FIFO, a hung filesystem) is killed after the grace."""
    paths = _host(tmp_path)
    monkeypatch.setattr(publishing, "_publish", lambda *a: time.sleep(30))
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        elapsed = _init(paths, tmp_path)
    finally:
        timer.cancel()
    assert elapsed < 0.5 + 2.0
    assert statusfiles.read_daemons_status(paths.run) == statusfiles.NOT_READY


def test_without_a_signal_init_reaches_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the same set-up with no signal gets to Ready (so the tests above prove the signal)."""
    paths = _host(tmp_path)
    monkeypatch.setattr(lifecycle, "_wait_for_signal", lambda *a: None)
    _init(paths, tmp_path)
    assert statusfiles.read_daemons_status(paths.run) == statusfiles.READY
