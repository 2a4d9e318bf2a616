"""``nvidia-driver init`` end to end on fixture Talos hosts, as a real process receiving real signals.

Fake modprobe/rmmod/insmod first on PATH record every call: on Talos there must be none, ever.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.hostenv import HOSTS, USERSPACE, Host, make_host
from helpers.support import NODE_FIXTURES
from helpers.trees import snapshot
from helpers.waits import wait_until


@pytest.fixture
def host(tmp_path: Path) -> Callable[..., Host]:
    """A fresh copy of a scenario per call, each with its own bin/, run/ and call log."""
    count = iter(range(1000))

    def make(scenario: str = "talos-1.13-open-595", userspace: Path | None = USERSPACE) -> Host:
        return make_host(tmp_path / f"h{next(count)}", scenario, userspace or HOSTS / scenario / "userspace")

    return make


def _pid_file_names(h: Host, proc: subprocess.Popen[str]) -> Callable[[], bool]:
    pid_file = h.run_dir / "nvidia-driver.pid"
    return lambda: pid_file.exists() and pid_file.read_text().strip() == str(proc.pid)


def _status(h: Host) -> str:
    """The status file's word, "" until init has written it (it takes the lock first, then writes it)."""
    try:
        return (h.run_dir / "validations/.driver-daemons-status").read_text()
    except FileNotFoundError:
        return ""


def test_no_wait_publishes_and_writes_state(host: Callable[..., Host]) -> None:
    h = host()
    done = h.run("init", "--no-wait", DRIVER_CONFIG_DIGEST="sha256-abc")
    assert done.returncode == 0, done.stderr
    assert (h.run_dir / "nvidia-driver.state").read_text() == "sha256-abc"
    assert _status(h) == "Ready"
    assert not (h.run_dir / "nvidia-driver.pid").exists()
    assert (h.driver_root / ".driver-container/manifest.json").is_file()
    assert (h.driver_root / "usr/lib/x86_64-linux-gnu/libcuda.so.595.91.07").is_file()
    assert "starting no daemon" in done.stderr
    assert not (h.run_dir.parent / "persistenced.log").exists()  # --no-wait leaves no process behind
    assert h.tool_calls() == []


def test_a_publish_decides_the_mount_of_driver_root_once(host: Callable[..., Host]) -> None:
    """A restart the unchanged check does not recognise (a published file's mtime moved) decides DRIVER_ROOT's
    mount once in ``init`` and hands the outcome to the publishing child (lifecycle/publishing.py)."""
    h = host()
    assert h.run("init", "--no-wait").returncode == 0
    lib = h.driver_root / "usr/lib/x86_64-linux-gnu/libcuda.so.595.91.07"
    st = lib.stat()
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    done = h.run("--verbose", "init", "--no-wait")
    assert done.returncode == 0, done.stderr
    assert "unchanged since its last publish" not in done.stderr  # the full publish ran, in its child
    assert "published" in done.stderr and lib.stat().st_mtime_ns == st.st_mtime_ns  # and repaired the file
    assert done.stderr.count("DRIVER_ROOT mount: ") == 1, done.stderr


def test_nvidia_compat_flags_are_ignored_and_unknown_ones_refused(host: Callable[..., Host]) -> None:
    h = host()
    bad = h.run("init", "--bogus-flag")
    assert bad.returncode == 2
    assert "--bogus-flag" in bad.stderr
    assert not h.run_dir.exists()  # refused before anything is written
    done = h.run("init", "-a", "--max-threads", "8", "--no-wait")
    assert done.returncode == 0, done.stderr
    assert "--accept-license: ignored" in done.stderr and "--max-threads 8: ignored" in done.stderr


def test_sigterm_while_waiting_for_modules(host: Callable[..., Host]) -> None:
    h = host("talos-1.13-uvm-missing")
    proc = h.start("init")
    wait_until(_pid_file_names(h, proc), "the pid file")
    wait_until(lambda: _status(h) == "NotReady", "NotReady")
    time.sleep(0.3)  # inside the wait loop
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    assert time.monotonic() - sent < 2.0
    assert "SIGTERM received" in stderr
    assert not (h.run_dir / "nvidia-driver.pid").exists()
    assert not h.driver_root.exists()
    assert h.tool_calls() == []


def test_module_wait_timeout_gives_machine_config(host: Callable[..., Host]) -> None:
    h = host("talos-1.13-uvm-missing")
    done = h.run("init", MODULE_WAIT_TIMEOUT="1")
    assert done.returncode == 1
    assert "still not loaded: nvidia_uvm" in done.stderr
    assert "machine:\n  kernel:\n    modules:\n      - name: nvidia\n      - name: nvidia_uvm" in done.stderr
    assert not h.driver_root.exists() and not (h.run_dir / "nvidia-driver.pid").exists()
    assert h.tool_calls() == []


def test_version_mismatch_stops_before_driver_root(host: Callable[..., Host]) -> None:
    h = host("talos-1.13-lts-580-vs-595", userspace=None)
    done = h.run("init", "--no-wait")
    assert done.returncode == 1
    assert "verification failed" in done.stderr and "580.178.04" in done.stderr
    assert not h.driver_root.exists()
    assert _status(h) == "NotReady"


def test_mismatch_keeps_previous_root_intact(host: Callable[..., Host]) -> None:
    good = host()
    assert good.run("init", "--no-wait").returncode == 0
    before = snapshot(good.driver_root, nlink=False)
    bad = host("talos-1.13-lts-580-vs-595", userspace=None)
    done = bad.run("init", "--no-wait", RUN_DIR=good.env["RUN_DIR"])
    assert done.returncode == 1
    assert snapshot(good.driver_root, nlink=False) == before


def test_two_concurrent_inits_exactly_one_proceeds(host: Callable[..., Host]) -> None:
    h = host("talos-1.13-uvm-missing")
    first = h.start("init")
    wait_until(_pid_file_names(h, first), "the first pid file")
    second = h.run("init", "--no-wait")
    assert second.returncode == 1
    assert f"already running (pid {first.pid})" in second.stderr
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=10)
    assert first.returncode == 0


def test_stale_pid_file_does_not_block(host: Callable[..., Host]) -> None:
    h = host()
    h.run_dir.mkdir(parents=True)
    (h.run_dir / "nvidia-driver.pid").write_text("999999\n")  # left by a SIGKILLed instance
    done = h.run("init", "--no-wait")
    assert done.returncode == 0, done.stderr


def test_a_lock_another_program_holds_does_not_wedge_init(host: Callable[..., Host]) -> None:
    """A process that is not nvidia-driver holding an flock on a leftover pid file refused every restart
    ("already running"); now init names it, replaces the file and publishes."""
    h = host()
    h.run_dir.mkdir(parents=True)
    pid_file = h.run_dir / "nvidia-driver.pid"
    pid_file.write_text("999999\n")
    pid_file.chmod(0o600)
    hold = (
        "import fcntl, os, sys, time\n"
        "fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_EX)\n"
        "print(1, flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold, str(pid_file)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "1\n"
        # The fixture procfs (PROCFS_ROOT) shows that lock and its holder as the kernel would.
        st, proc = os.stat(pid_file), Path(h.env["PROCFS_ROOT"])
        dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        (proc / "locks").write_text(f"1: FLOCK  ADVISORY  WRITE {holder.pid} {dev} 0 EOF\n")
        (proc / str(holder.pid)).mkdir()
        (proc / str(holder.pid) / "cmdline").write_bytes(b"flock\x00/run/nvidia/nvidia-driver.pid\x00sleep\x00")
        done = h.run("init", "--no-wait", timeout=60)
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert done.returncode == 0, done.stderr
    assert f"locked by pid {holder.pid} (flock /run/nvidia/nvidia-driver.pid sleep), which is not nvidia-driver" in (
        done.stderr
    )


def test_waits_with_persistenced_then_stops_it_on_sigterm(host: Callable[..., Host]) -> None:
    h = host()
    proc = h.start("init", DRIVER_CONFIG_DIGEST="d1")
    wait_until(lambda: (h.run_dir / "validations/.driver-daemons-status").exists() and _status(h) == "Ready", "Ready")
    socket = h.driver_root / "run/nvidia-persistenced/socket"
    assert socket.exists()  # where the toolkit looks, through the runtime-dir link
    log = h.run_dir.parent / "persistenced.log"
    assert log.read_text() == "nvidia-persistenced --persistence-mode --foreground\n"
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    assert "Done, now waiting for signal" in stderr
    assert "nvidia-persistenced stopped" in stderr
    assert not socket.exists()  # the daemon removed it on SIGTERM: it was running until then
    assert not (h.run_dir / "nvidia-driver.pid").exists()
    assert (h.driver_root / ".driver-container/manifest.json").is_file()  # root kept
    assert h.tool_calls() == []


def test_persistenced_death_exits_non_zero(host: Callable[..., Host]) -> None:
    h = host()
    done = h.run("init", FAKE_PERSISTENCED_MODE="die-later", timeout=60)
    assert done.returncode == 1
    assert "nvidia-persistenced (pid" in done.stderr and "exited with status 4" in done.stderr
    assert _status(h) == "NotReady"
    assert not (h.run_dir / "nvidia-driver.pid").exists()


def test_persistenced_false_starts_nothing(host: Callable[..., Host]) -> None:
    h = host()
    proc = h.start("init", NVIDIA_PERSISTENCED="false")
    wait_until(lambda: (h.run_dir / "validations/.driver-daemons-status").exists() and _status(h) == "Ready", "Ready")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert not (h.run_dir.parent / "persistenced.log").exists()


def test_load_and_unload_on_talos(host: Callable[..., Host]) -> None:
    h = host()
    load = h.run("load")
    assert load.returncode == 0, load.stderr
    assert "595.91.07 loaded and matching" in load.stdout
    unload = h.run("unload")
    assert unload.returncode == 0
    assert "Talos owns the NVIDIA kernel modules" in unload.stdout
    assert h.tool_calls() == []


def _kill_inside_publish(h: Host) -> bool:
    """SIGKILL init as soon as publishing has written into DRIVER_ROOT; True when the manifest (written
    last) was not there yet, i.e. the kill landed mid-publish."""
    proc = h.start("init", "--no-wait")
    staged = h.driver_root / "usr"
    deadline = time.monotonic() + 60
    while not staged.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    proc.kill()
    proc.communicate(timeout=10)
    return not (h.driver_root / ".driver-container/manifest.json").exists()


def test_sigkill_during_publish_then_rerun_gives_a_clean_root(host: Callable[..., Host], tmp_path: Path) -> None:
    clean = host()
    assert clean.run("init", "--no-wait").returncode == 0
    for _attempt in range(5):  # the publish takes ~0.2 s; the kill almost always lands inside it
        h = host()
        if _kill_inside_publish(h):
            break
    else:
        pytest.fail("could not SIGKILL init inside the publish step in 5 attempts")
    assert (h.run_dir / "nvidia-driver.pid").exists()  # left behind by the kill: must not block the rerun
    rerun = h.run("init", "--no-wait")
    assert rerun.returncode == 0, rerun.stderr
    manifest = ".driver-container/manifest.json"
    rerun_tree, clean_tree = snapshot(h.driver_root, nlink=False), snapshot(clean.driver_root, nlink=False)
    # The manifest records write times of generated files (etc/ld.so.conf): compare what it says instead.
    del rerun_tree[manifest], clean_tree[manifest]
    assert _manifest_identity(h.driver_root / manifest) == _manifest_identity(clean.driver_root / manifest)
    assert rerun_tree == clean_tree


def _manifest_identity(path: Path) -> list[tuple[object, ...]]:
    entries = json.loads(path.read_bytes())["files"]
    return [tuple(e.get(k) for k in ("path", "type", "mode", "size", "sha256", "target")) for e in entries]


def test_reload_peermem_on_talos_waits_then_exits_on_signal(host: Callable[..., Host]) -> None:
    h = host()
    # The fixture host has no nvidia_peermem: load it "as machined would" by adding its /proc/modules line.
    with (h.root / "proc/modules").open("a") as modules:
        modules.write("nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)\n")
    proc = h.start("reload_nvidia_peermem", MODULE_WAIT_TIMEOUT="30")
    time.sleep(1.0)
    assert proc.poll() is None  # still waiting for .driver-ctr-ready
    ready = h.run_dir / "validations/.driver-ctr-ready"
    ready.parent.mkdir(parents=True, exist_ok=True)
    ready.write_text("GPU_DIRECT_RDMA_ENABLED: true\n")
    time.sleep(1.5)
    assert proc.poll() is None  # now waiting for a signal
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    assert "nvidia_peermem loaded; waiting for a signal" in stderr
    assert h.tool_calls() == []


def test_reload_peermem_on_talos_never_modprobes_nor_waits_for_it(host: Callable[..., Host]) -> None:
    # nvidia_peermem cannot load on Talos (no MOFED): the sidecar must neither load it, nor time out
    # (a crash-looping sidecar), nor print a machine-config snippet for it.
    h = host()
    ready = h.run_dir / "validations/.driver-ctr-ready"
    ready.parent.mkdir(parents=True)
    ready.write_text("GPU_DIRECT_RDMA_ENABLED: true\n")
    proc = h.start("reload_nvidia_peermem", MODULE_WAIT_TIMEOUT="1")
    time.sleep(2.5)  # longer than MODULE_WAIT_TIMEOUT: a wait for the module would have failed by now
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    assert "nvidia_peermem cannot load on Talos" in stderr and "DMA-BUF" in stderr
    assert "- name: nvidia_peermem" not in stderr and "kind: KernelModuleConfig" not in stderr
    assert h.tool_calls() == []


def test_node_steps_when_the_kernel_files_exist(host: Callable[..., Host]) -> None:
    """The same host plus the two kernel files every real Talos node has and the fixture omits:
    /proc/devices (majors of a two-GPU MIG node) and an empty firmware_class.path parameter."""
    h = host()
    node_fixtures = NODE_FIXTURES
    shutil.copy(node_fixtures / "h100x2-mig/proc/devices", h.root / "proc/devices")
    param = h.root / "sys/module/firmware_class/parameters/path"
    param.parent.mkdir(parents=True)
    param.write_text("")
    done = h.run("init", "--no-wait", HOST_DRIVER_ROOT="/run/nvidia/driver")
    assert done.returncode == 0, done.stderr
    assert param.read_text() == "/run/nvidia/driver/lib/firmware"
    if os.geteuid() == 0:
        assert (h.driver_root / "dev/nvidiactl").is_char_device()
        assert os.major((h.driver_root / "dev/nvidia-uvm").lstat().st_rdev) == 237
    else:
        assert "device nodes not created" in done.stderr
