from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from helpers.support import FIXTURES

from driver_container.base.errors import ModuleWaitTimeout
from driver_container.base.paths import HostPaths
from driver_container.lifecycle.modwait import machine_config_snippet, required_modules, wait_for_modules
from driver_container.runtime.supervise import Shutdown
from driver_container.settings import Settings

HOSTS = FIXTURES / "hosts"


def _paths(scenario: str, tmp_path: Path) -> HostPaths:
    root = HOSTS / scenario
    return HostPaths(
        host_root=root / "host", procfs_root=root / "proc", sysfs_root=root / "sys", run_dir=tmp_path / "run"
    )


def test_required_modules_follow_settings() -> None:
    assert required_modules(Settings()) == ("nvidia", "nvidia_uvm", "nvidia_modeset")
    assert required_modules(Settings(nvidia_modeset=False)) == ("nvidia", "nvidia_uvm")
    assert required_modules(Settings(gpu_direct_rdma=True)) == (
        "nvidia",
        "nvidia_uvm",
        "nvidia_modeset",
        "nvidia_peermem",
    )


def test_snippet_is_talos_machine_config() -> None:
    assert machine_config_snippet(("nvidia", "nvidia_uvm")) == (
        "machine:\n  kernel:\n    modules:\n      - name: nvidia\n      - name: nvidia_uvm"
    )


def test_shutdown_wait_returns_at_once_on_a_signal() -> None:
    previous = signal.getsignal(signal.SIGHUP)
    shutdown = Shutdown().install()
    try:
        assert shutdown.wait(0.01) is False
        os.kill(os.getpid(), signal.SIGHUP)
        started = time.monotonic()
        assert shutdown.wait(30.0) is True
        assert time.monotonic() - started < 1.0
        assert shutdown.describe() == "SIGHUP"
    finally:
        shutdown.restore()
    assert signal.getsignal(signal.SIGHUP) == previous


def test_loaded_modules_return_at_once(tmp_path: Path) -> None:
    """What the last poll read comes back, so that ``inspect_host`` need not read it again."""
    shutdown = Shutdown()  # not installed: wait() only sleeps
    started = time.monotonic()
    found = wait_for_modules(_paths("talos-1.13-open-595", tmp_path), Settings(), shutdown, talos=True)
    assert time.monotonic() - started < 0.5
    assert found is not None
    assert [n for n, m in found.modules.items() if m.loaded] == ["nvidia", "nvidia_uvm", "nvidia_modeset"]
    assert found.modules["nvidia"].version == "595.91.07"


def test_timeout_names_missing_modules_and_the_fix(tmp_path: Path) -> None:
    settings = Settings()._replace(module_wait_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(ModuleWaitTimeout) as caught:
        wait_for_modules(_paths("talos-1.13-uvm-missing", tmp_path), settings, Shutdown(), talos=True, poll_s=0.05)
    assert 0.3 <= time.monotonic() - started < 2.0
    assert "still not loaded: nvidia_uvm" in caught.value.message
    assert (caught.value.modules, caught.value.timeout) == (("nvidia_uvm",), 0.3)
    assert caught.value.fix is not None and "      - name: nvidia_uvm" in caught.value.fix


def test_peermem_required_with_rdma_on_generic_hosts(tmp_path: Path) -> None:
    settings = Settings(gpu_direct_rdma=True)._replace(module_wait_timeout=0.1)
    with pytest.raises(ModuleWaitTimeout, match="nvidia_peermem"):
        wait_for_modules(_paths("talos-1.13-open-595", tmp_path), settings, Shutdown(), talos=False, poll_s=0.05)


def test_signal_ends_the_wait(tmp_path: Path) -> None:
    shutdown = Shutdown().install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        started = time.monotonic()
        result = wait_for_modules(
            _paths("talos-1.13-uvm-missing", tmp_path), Settings(), shutdown, talos=True, poll_s=5.0
        )
    finally:
        shutdown.restore()
    assert result is None
    assert time.monotonic() - started < 1.0
