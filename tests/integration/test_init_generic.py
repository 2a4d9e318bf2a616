"""``nvidia-driver init``/``load``/``unload`` end to end on generic (non-Talos) fixture hosts (docs/generic-hosts.md).

Each test runs the real CLI as a process, with the fake modprobe/rmmod/modinfo of tests/helpers/fakes.py first on
PATH: they record every argv and edit the copied fixture /proc and /sys as the kernel would, so what init
reads back after its module commands is observable. The Talos tests of the same commands prove the fakes
are never called there (their log file is never even created).

The Ubuntu fixtures stand for a host with NVIDIA 580.105.08 loaded; the image here is the 595.91.07
userspace fixture, so each copy is moved to 595.91.07 (the version a previous container of this image
loaded) and the scenario's module tree for the running kernel is kept in the image copy.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.fakes import FakeHost, make_fake_host
from helpers.opened import CHILD_PRELUDE
from helpers.support import FIXTURES
from helpers.waits import wait_until

USERSPACE = FIXTURES / "userspace" / "debian-595.91.07"
VERSION = "595.91.07"
FIXTURE_VERSION = "580.105.08"  # what the committed Ubuntu fixtures have loaded
DIGEST = "sha256-0f1e2d"
# What init passes for the fixtures' drivers/*.conf on R580+ (NVIDIA adds the coherent-memory mode).
NVIDIA_PARAMS = [
    "NVreg_EnableGpuFirmware=1",
    "NVreg_OpenRmEnableUnsupportedGpus=1",
    "NVreg_RegistryDwords=RMUseSwI2c=0x01;RMI2cSpeed=100",
    "NVreg_CoherentGPUMemoryMode=driver",
]
IDLE_UNLOAD_CALLS = [["rmmod", "nvidia_modeset"], ["rmmod", "nvidia_uvm"], ["rmmod", "nvidia"]]
# nvidia-persistenced keeps /dev/nvidiactl open while it runs: the kernel holds one reference on nvidia
# (sysfs refcnt) until it exits, so init can unload only after stopping it.
HOLDING_PERSISTENCED = """
import os, signal, sys, time
from pathlib import Path
refcnt = Path(os.environ["FAKE_SYS"]) / "module/nvidia/refcnt"
socket = Path(os.environ["FAKE_PERSISTENCED_DIR"]) / "socket"
def bump(delta: int) -> None:
    refcnt.write_text(f"{int(refcnt.read_text()) + delta}\\n")
def term(_signum: int, _frame: object) -> None:
    bump(-1); socket.unlink(missing_ok=True); sys.exit(0)
signal.signal(signal.SIGTERM, term)
bump(1); socket.write_text("")
while True:
    time.sleep(1)
"""
SIGNAL_EXIT_S = 5.0  # "bounded in time" (measured ~0.1 s; margin for a loaded CI): well inside k8s' 30 s


@dataclass
class Generic:
    fake: FakeHost
    env: dict[str, str]

    @property
    def run_dir(self) -> Path:
        return self.fake.paths.run_dir

    def cli(self, *args: str, timeout: float = 60, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "driver_container", *args],
            env={**self.env, **extra},
            cwd=self.fake.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, *args: str, **extra: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "driver_container", *args],
            env={**self.env, **extra},
            cwd=self.fake.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def status(self) -> str | None:
        path = self.run_dir / "validations/.driver-daemons-status"
        return path.read_text() if path.exists() else None

    def loaded(self) -> list[str]:
        return [line.split()[0] for line in self.fake.proc_modules().splitlines() if line.startswith("nvidia")]


def _with_version(fake: FakeHost, old: str, new: str) -> None:
    """Make the copy's loaded NVIDIA modules report ``new`` (procfs banner and sysfs versions)."""
    for path in [fake.root / "proc/driver/nvidia/version", *fake.root.glob("sys/module/nvidia*/version")]:
        if path.exists():
            path.write_text(path.read_text().replace(old, new))


@pytest.fixture
def generic(tmp_path: Path) -> Callable[..., Generic]:
    count = iter(range(100))

    def make(scenario: str, *, digest_file: str | None = None) -> Generic:
        fake = make_fake_host(tmp_path / f"g{next(count)}", scenario, version=VERSION)
        _with_version(fake, FIXTURE_VERSION, VERSION)
        image = fake.paths.userspace_root
        scenario_image = image.with_name("scenario-image")
        image.rename(scenario_image)
        shutil.copytree(USERSPACE, image, symlinks=True)
        # The scenario's module tree for the running kernel (image/lib is a merged-/usr link to usr/lib).
        if (scenario_image / "lib/modules").is_dir():  # Talos scenarios have none: no module is ours to load
            shutil.copytree(scenario_image / "lib/modules", image / "lib/modules")
        shutil.rmtree(scenario_image)
        if digest_file is not None:
            fake.paths.run_dir.mkdir(parents=True, exist_ok=True)
            fake.paths.state_file.write_text(digest_file)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DRIVER_", "NVIDIA_", "FAKE_"))}
        env.update(fake.env)
        env.update(
            HOST_ROOT_MOUNT=str(fake.paths.host_root),
            PROCFS_ROOT=str(fake.paths.procfs_root),
            SYSFS_ROOT=str(fake.paths.sysfs_root),
            DRIVERS_CONF_DIR=str(fake.paths.drivers_conf_dir),
            RUN_DIR=str(fake.paths.run_dir),
            USERSPACE_ROOT=str(image),
            HOST_OS_RELEASE=str(fake.root / "host/etc/os-release"),
            NVIDIA_PERSISTENCED="false",
            DRIVER_CONFIG_DIGEST=DIGEST,
        )
        return Generic(fake, env)

    return make


def load_calls(basedir: Path, *, peermem: bool = False) -> list[list[str]]:
    """modinfo for the version (no DRIVER_VERSION), then modprobe from ``basedir``'s module tree, in order."""
    d = str(basedir)
    calls = [
        ["modinfo", "-b", d, "-F", "version", "nvidia"],
        ["modprobe", "-d", d, "nvidia", *NVIDIA_PARAMS],
        ["modprobe", "-d", d, "nvidia-uvm", "uvm_perf_prefetch_enable=0"],
        ["modprobe", "-d", d, "nvidia-modeset"],
    ]
    return calls + ([["modprobe", "-d", d, "nvidia-peermem"]] if peermem else [])


def _published(g: Generic) -> None:
    assert g.status() == "Ready"
    assert (g.run_dir / "nvidia-driver.state").read_text() == DIGEST
    assert (g.run_dir / "driver/.driver-container/manifest.json").is_file()
    assert (g.run_dir / f"driver/usr/lib/x86_64-linux-gnu/libcuda.so.{VERSION}").is_file()
    assert not (g.run_dir / "nvidia-driver.pid").exists()


def test_matching_digest_is_userspace_only(generic: Callable[..., Generic]) -> None:
    g = generic("ubuntu-loaded-idle", digest_file=DIGEST)
    before = g.fake.proc_modules()
    done = g.cli("init", "--no-wait")
    assert done.returncode == 0, done.stderr
    assert "matches DRIVER_CONFIG_DIGEST: userspace-only publish" in done.stderr
    assert not g.fake.log.exists()  # no modprobe, rmmod or modinfo ran at all
    assert g.fake.proc_modules() == before
    _published(g)


@pytest.mark.parametrize("digest_file", ["sha256-previous-config", None], ids=["digest-differs", "no-state-file"])
def test_other_digest_unloads_then_loads_with_parameters(
    generic: Callable[..., Generic], digest_file: str | None
) -> None:
    g = generic("ubuntu-loaded-idle", digest_file=digest_file)
    done = g.cli("init", "--no-wait")
    assert done.returncode == 0, done.stderr
    # rmmod dependants before nvidia, then modprobe nvidia first, each with its parameters
    assert g.fake.calls() == IDLE_UNLOAD_CALLS + load_calls(g.fake.paths.userspace_root)
    assert g.loaded() == ["nvidia", "nvidia_uvm", "nvidia_modeset"]
    params = (g.fake.root / "proc/driver/nvidia/params").read_text()
    assert "CoherentGPUMemoryMode: driver" in params and "EnableGpuFirmware: 1" in params
    assert (g.fake.root / "sys/module/nvidia_uvm/parameters/uvm_perf_prefetch_enable").read_text() == "0\n"
    _published(g)


def test_generic_init_detects_the_platform_once(generic: Callable[..., Generic], tmp_path: Path) -> None:
    """unload, load and verify used to detect again (4 os-release reads in one init): now ``detect``'s
    result is passed down. The opens are traced by an audit hook in the init process (and its forked
    publisher), nothing patched."""
    g = generic("ubuntu-loaded-idle", digest_file="sha256-previous-config")
    trace = tmp_path / "opened.txt"
    fd = os.open(trace, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    code = CHILD_PRELUDE + "import runpy; sys.argv = ['nvidia-driver', 'init', '--no-wait']\n"
    code += "runpy.run_module('driver_container', run_name='__main__', alter_sys=True)\n"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            env={**g.env, "OPENED_FD": str(fd), "OPENED_MATCH": "os-release"},
            cwd=g.fake.root,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            pass_fds=(fd,),
        )
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stderr
    assert g.fake.calls() == IDLE_UNLOAD_CALLS + load_calls(g.fake.paths.userspace_root)  # the full generic path
    assert trace.read_text().splitlines() == [g.env["HOST_OS_RELEASE"]]


def test_matching_digest_with_a_dependant_missing_reloads(generic: Callable[..., Generic]) -> None:
    """nvidia loaded but nvidia_uvm gone (removed by hand): the fast path would wait for it forever."""
    g = generic("ubuntu-loaded-idle", digest_file=DIGEST)
    removed = subprocess.run([str(g.fake.fake_dir / "bin/rmmod"), "nvidia_uvm"], env=g.fake.env, check=False)
    assert removed.returncode == 0 and g.loaded() == ["nvidia_modeset", "nvidia"]
    g.fake.log.unlink()
    done = g.cli("init", "--no-wait", MODULE_WAIT_TIMEOUT="10")
    assert done.returncode == 0, done.stderr
    assert "userspace-only publish" not in done.stderr
    reload = [["rmmod", "nvidia_modeset"], ["rmmod", "nvidia"], *load_calls(g.fake.paths.userspace_root)]
    assert g.fake.calls() == reload
    assert g.loaded() == ["nvidia", "nvidia_uvm", "nvidia_modeset"]
    _published(g)


def test_state_file_without_loaded_modules_loads(generic: Callable[..., Generic]) -> None:
    """After a reboot RUN_DIR may survive (hostPath) while no module is loaded: the digest alone is not enough."""
    g = generic("ubuntu-unloaded", digest_file=DIGEST)
    done = g.cli("init", "--no-wait")
    assert done.returncode == 0, done.stderr
    assert g.fake.calls() == load_calls(g.fake.paths.userspace_root)  # nothing loaded, so no rmmod
    _published(g)


def test_rdma_with_mellanox_loads_peermem_from_the_host_tree(generic: Callable[..., Generic]) -> None:
    g = generic("ubuntu-mellanox-unloaded")
    done = g.cli("init", "--no-wait", GPU_DIRECT_RDMA_ENABLED="true")
    assert done.returncode == 0, done.stderr
    # The image has no module tree here: the host's DKMS modules are used (modprobe -d HOST_ROOT_MOUNT).
    assert g.fake.calls() == load_calls(g.fake.paths.host_root, peermem=True)
    assert g.loaded() == ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_peermem"]
    _published(g)


def test_rdma_without_mellanox_neither_loads_nor_waits_for_peermem(generic: Callable[..., Generic]) -> None:
    g = generic("ubuntu-unloaded")
    started = time.monotonic()
    done = g.cli("init", "--no-wait", GPU_DIRECT_RDMA_ENABLED="true", MODULE_WAIT_TIMEOUT="20")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 15  # did not sit out the module wait for nvidia_peermem
    assert g.fake.calls() == load_calls(g.fake.paths.userspace_root)
    assert "no Mellanox PCI device" in done.stderr
    _published(g)


def test_busy_driver_with_other_digest_fails_before_any_module_command(generic: Callable[..., Generic]) -> None:
    g = generic("ubuntu-loaded-busy", digest_file="sha256-previous-config")
    before = g.fake.proc_modules()
    done = g.cli("init", "--no-wait")
    assert done.returncode == 1
    assert "driver in use by" in done.stderr and "nvidia_fs" in done.stderr
    assert not g.fake.log.exists()
    assert g.fake.proc_modules() == before
    assert g.status() == "NotReady"
    assert not (g.run_dir / "driver").exists()
    assert not (g.run_dir / "nvidia-driver.pid").exists()


def _sigterm_after_ready(g: Generic, ready: Callable[[], bool] = lambda: True) -> tuple[str, float]:
    """Start a waiting init, SIGTERM it once Ready; its stderr and seconds from signal to exit."""
    proc = g.start("init")
    try:
        wait_until(lambda: g.status() == "Ready" and ready() and proc.poll() is None, "Ready")
        time.sleep(0.3)  # inside the wait for a signal
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert "SIGTERM received" in stderr
    assert not (g.run_dir / "nvidia-driver.pid").exists()
    assert (g.run_dir / "driver/.driver-container/manifest.json").is_file()  # the root is kept
    return stderr, elapsed


def test_sigterm_unloads_an_idle_driver(generic: Callable[..., Generic]) -> None:
    g = generic("ubuntu-loaded-idle", digest_file=DIGEST)
    stderr, elapsed = _sigterm_after_ready(g)
    assert elapsed < SIGNAL_EXIT_S
    assert g.fake.calls() == IDLE_UNLOAD_CALLS  # fast path at start, unload only at the signal
    assert g.loaded() == []
    assert "unloaded nvidia_modeset, nvidia_uvm, nvidia" in stderr


def test_sigterm_stops_persistenced_before_unloading(generic: Callable[..., Generic], tmp_path: Path) -> None:
    g = generic("ubuntu-loaded-idle", digest_file=DIGEST)
    daemon = g.fake.fake_dir / "bin/nvidia-persistenced"
    daemon.write_text(f"#!{sys.executable}\n{HOLDING_PERSISTENCED}")
    daemon.chmod(0o755)
    runtime_dir = tmp_path / "container/var/run/nvidia-persistenced"
    g.env.update(
        NVIDIA_PERSISTENCED="true",
        NVIDIA_PERSISTENCED_RUNTIME_DIR=str(runtime_dir),
        FAKE_PERSISTENCED_DIR=str(runtime_dir),
    )
    refcnt = g.fake.root / "sys/module/nvidia/refcnt"
    stderr, elapsed = _sigterm_after_ready(g, ready=lambda: refcnt.read_text() == "3\n")
    assert elapsed < SIGNAL_EXIT_S
    assert stderr.index("nvidia-persistenced stopped") < stderr.index("unloaded nvidia_modeset, nvidia_uvm, nvidia")
    assert g.fake.calls() == IDLE_UNLOAD_CALLS
    assert g.loaded() == []


def test_sigterm_leaves_a_busy_driver_loaded(generic: Callable[..., Generic]) -> None:
    g = generic("ubuntu-loaded-busy", digest_file=DIGEST)
    before = g.fake.proc_modules()
    stderr, elapsed = _sigterm_after_ready(g)
    assert elapsed < SIGNAL_EXIT_S
    assert not g.fake.log.exists()  # refused before any rmmod
    assert g.fake.proc_modules() == before
    assert "modules left loaded" in stderr and "driver in use by" in stderr


def test_unload_then_load_commands_on_a_generic_host(generic: Callable[..., Generic]) -> None:
    g = generic("ubuntu-loaded-idle")
    unload = g.cli("unload")
    assert unload.returncode == 0, unload.stderr
    assert unload.stdout == "NVIDIA modules unloaded\n"
    load = g.cli("load")
    assert load.returncode == 0, load.stderr
    assert load.stdout == f"NVIDIA driver {VERSION} loaded and matching: nvidia, nvidia_uvm, nvidia_modeset\n"
    assert g.fake.calls() == IDLE_UNLOAD_CALLS + load_calls(g.fake.paths.userspace_root)


def test_unload_command_refuses_a_busy_driver(generic: Callable[..., Generic]) -> None:
    g = generic("ubuntu-loaded-busy")
    unload = g.cli("unload")
    assert unload.returncode == 1
    assert "driver in use by" in unload.stderr and "2 references to nvidia from open /dev/nvidia*" in unload.stderr
    assert not g.fake.log.exists()


def test_talos_never_calls_the_module_tools(generic: Callable[..., Generic]) -> None:
    """The same commands on a Talos host: the fakes are first on PATH, yet their log is never created."""
    g = generic("talos-1.13-loaded", digest_file="sha256-previous-config")
    done = g.cli("init", "--no-wait")
    assert done.returncode == 0, done.stderr
    assert "platform: talos" in done.stderr
    _published(g)
    load = g.cli("load")
    assert load.returncode == 0, load.stderr
    assert f"{VERSION} loaded and matching" in load.stdout
    unload = g.cli("unload")
    assert unload.returncode == 0, unload.stderr
    assert "Talos owns the NVIDIA kernel modules" in unload.stdout
    (g.run_dir / "validations/.driver-daemons-status").unlink()
    stderr, _ = _sigterm_after_ready(g)
    assert "SIGTERM received" in stderr
    assert not g.fake.log.exists()
