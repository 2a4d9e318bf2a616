"""``nvidia-driver init`` on NVSwitch / NVLink5 fixture hosts, as a real process, with recording fake
nvidia-persistenced, nv-fabricmanager, nvlsm and nvidia-smi (tests/helpers/fake_*.py)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.fakes import (
    add_fabric_to_image,
    fabric_env,
    install_fake_nvidia_smi,
    recorded_calls,
)
from helpers.hostenv import Host, make_host
from helpers.waits import wait_until

H100 = "talos-1.13-hgx-h100-nvswitch"
B200 = "talos-1.13-hgx-b200-nvlink5"


@pytest.fixture
def host(tmp_path: Path) -> Callable[..., Host]:
    count = iter(range(100))

    def make(scenario: str, *, fm: bool = True, nvlsm: bool = True) -> Host:
        h = make_host(tmp_path / f"h{next(count)}", scenario)
        if fm:
            add_fabric_to_image(h.userspace, nvlsm=nvlsm)
        install_fake_nvidia_smi(h.base / "bin")
        h.env.update(fabric_env(h.base), FABRIC_WAIT_TIMEOUT="20")
        return h

    return make


def _terminate(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=20)
    return proc.returncode, stderr


def test_nvswitch_fm_after_persistenced_ready_only_after_fabric(host: Callable[..., Host]) -> None:
    h = host(H100)
    proc = h.start("init", FAKE_FABRIC_DELAY="2", NVFM_CONFIG_LOG_LEVEL="3", NVFM_CONFIG_NEW_FIELD="x|&y")
    try:
        wait_until(lambda: any("/nv-fabricmanager -c" in line for line in h.log()), "Fabric Manager")
        assert h.status() == "NotReady"  # FM runs, the fabric is still training
        wait_until(lambda: h.status() == "Ready", "Ready")
        assert (h.fake / "fabric-state").read_text() == "Completed"  # Ready came after completion
        config = h.fabric_run / "fabricmanager.cfg"
        lines = h.daemon_lines()
        assert lines[0] == "nvidia-persistenced --persistence-mode --foreground"
        assert lines[1] == f"{h.env['USERSPACE_ROOT']}/usr/bin/nv-fabricmanager -c {config}"
        seen = (h.fake / "fm-config-seen.cfg").read_text().splitlines()
        socket = h.run_dir / "driver/run/nvidia-fabricmanager/socket"
        assert "LOG_LEVEL=3" in seen and "DAEMONIZE=0" in seen and "NEW_FIELD=x|&y" in seen
        assert f"FM_CMD_UNIX_SOCKET_PATH={socket}" in seen
        assert socket.exists()  # where the container toolkit looks
        image_cfg = Path(h.env["USERSPACE_ROOT"]) / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
        assert "DAEMONIZE=1" in image_cfg.read_text()  # the image's file is never edited
        pid = (h.fabric_run / "nv-fabricmanager.pid").read_text().strip()
        assert pid.isdigit() and Path(f"/proc/{pid}").exists()
    finally:
        code, stderr = _terminate(proc)
    assert code == 0, stderr
    assert "still waiting for the fabric" in stderr or "fabric completed on 8 GPU(s)" in stderr
    assert h.daemon_lines()[-1] == "nv-fabricmanager stopped"
    assert not (h.fabric_run / "nv-fabricmanager.pid").exists()
    assert recorded_calls(h.calls) == []


def test_nvlink5_nvlsm_then_fm_with_port_guid_then_sigterm_stops_both(host: Callable[..., Host]) -> None:
    h = host(B200)
    proc = h.start("init", NVFM_CONFIG_FABRIC_MODE="1")
    try:
        wait_until(lambda: h.status() == "Ready", "Ready")
        run = h.fabric_run
        lines = h.daemon_lines()
        image = Path(h.env["USERSPACE_ROOT"])
        assert lines[1:3] == [
            f"{image}/opt/nvidia/nvlsm/sbin/nvlsm --config {image}/usr/share/nvidia/nvlsm/nvlsm.conf "
            f"--guid 0xa088c20300123457 --pid_file {run}/nvlsm.pid "
            f"--log_file {h.env['FABRICMANAGER_LOG_DIR']}/nvlsm.log",
            f"{image}/usr/bin/nv-fabricmanager -c {run}/fabricmanager.cfg --fm-sm-mgmt-port-guid 0xa088c20300123457",
        ]
        assert "nvidia-smi -r" in h.log()  # FABRIC_MODE=1 on NVLink5: GPUs reset after FM start
        assert "FABRIC_MODE=1" in (h.fake / "fm-config-seen.cfg").read_text().splitlines()
        assert (run / "nvlsm.pid").exists() and (run / "nv-fabricmanager.pid").exists()
    finally:
        code, stderr = _terminate(proc)
    assert code == 0, stderr
    stopped = [line for line in h.daemon_lines() if line.endswith("stopped")]
    assert stopped == ["nv-fabricmanager stopped", "nvlsm stopped"]  # reverse start order
    assert not (h.fabric_run / "fm_sm_ipc.socket").exists()
    assert not (h.fabric_run / "nvlsm.pid").exists()


def test_fm_failing_to_start_fails_init_with_its_log(host: Callable[..., Host]) -> None:
    h = host(H100)
    done = h.run("init", FAKE_FM_MODE="die")
    assert done.returncode == 1
    assert "nv-fabricmanager (pid" in done.stderr and "exited with status 3" in done.stderr
    assert "fatal: cannot open the NVSwitch devices" in done.stderr  # the log tail
    assert "fix:" in done.stderr
    assert h.status() == "NotReady"


def test_fm_dying_after_ready_fails_init(host: Callable[..., Host]) -> None:
    h = host(H100)
    done = h.run("init", FAKE_FM_MODE="die-later", timeout=60)
    assert done.returncode == 1, done.stderr
    assert "exited with status 4" in done.stderr and "lost the fabric" in done.stderr
    assert h.status() == "NotReady"
    assert "nvidia-persistenced stopped" in done.stderr  # the rest is cleaned up


def test_fabric_never_completing_times_out(host: Callable[..., Host]) -> None:
    h = host(H100)
    done = h.run("init", FAKE_FABRIC_DELAY="30", FABRIC_WAIT_TIMEOUT="2")
    assert done.returncode == 1
    assert "not completed after 2 s (8 Not Started)" in done.stderr
    assert "FABRIC_WAIT_TIMEOUT" in done.stderr
    assert "nv-fabricmanager stopped" in h.daemon_lines()


def test_fabric_registration_error_fails_init(host: Callable[..., Host]) -> None:
    h = host(H100)
    done = h.run("init", FAKE_FABRIC_STATUS="Timeout")
    assert done.returncode == 1
    assert "fabric registration failed: 00000000:18:00.0 status Timeout" in done.stderr


def test_host_run_fm_is_not_duplicated(host: Callable[..., Host]) -> None:
    h = host(H100)
    # A Fabric Manager the host runs: pid file where NVIDIA's packages write it, comm as the kernel shows it.
    pid = os.getpid()
    (Path(h.env["PROCFS_ROOT"]) / str(pid)).mkdir()
    (Path(h.env["PROCFS_ROOT"]) / str(pid) / "comm").write_text("nv-fabricmanage\n")
    (h.fabric_run / "nv-fabricmanager.pid").write_text(f"{pid}\n")
    (h.fake / "fabric-state").write_text("Completed")  # its fabric is trained
    proc = h.start("init")
    try:
        wait_until(lambda: h.status() == "Ready", "Ready")
    finally:
        code, stderr = _terminate(proc)
    assert code == 0, stderr
    assert not [line for line in h.daemon_lines() if "/nv-fabricmanager" in line]
    assert "the host runs it" in stderr
    assert (h.fabric_run / "nv-fabricmanager.pid").read_text() == f"{pid}\n"  # left alone


def test_nvswitch_image_without_fm_is_not_ready(host: Callable[..., Host]) -> None:
    h = host(H100, fm=False)
    done = h.run("init")
    assert done.returncode == 1
    assert "FABRIC_MANAGER_MISSING" in done.stderr
    assert h.status() == "NotReady"
    assert not (h.run_dir / "driver/.driver-container/manifest.json").exists()


def test_ordinary_node_starts_no_fabric_daemon_and_runs_no_nvidia_smi(host: Callable[..., Host]) -> None:
    h = host("talos-1.13-open-595")
    proc = h.start("init")
    try:
        wait_until(lambda: h.status() == "Ready", "Ready")
    finally:
        code, stderr = _terminate(proc)
    assert code == 0, stderr
    assert h.log() == ["nvidia-persistenced --persistence-mode --foreground"]
    assert not any(h.fabric_run.iterdir())
