"""Hostile host trees and values for ``status`` and ``init``: links out of /proc, /sys and the previous
DRIVER_ROOT, FIFOs where kernel files belong, and parameter/env values with shell metacharacters.

Nothing outside RUN_DIR may change (snapshot of everything else), no read may block, no value may
reach a shell: the marker files a shell would create must not exist.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest
from helpers.hostenv import Host, make_host
from helpers.trees import snapshot

from driver_container.formats.modconf import parse_module_conf
from driver_container.modprobe.generic import build_modprobe_argv
from driver_container.runtime.runner import Runner

SECRET = "SECRET-outside-the-roots"


def _setup(tmp_path: Path) -> tuple[Host, Path]:
    h = make_host(tmp_path / "h")
    out = tmp_path / "h/outside"
    out.mkdir()
    (out / "secret").write_text(SECRET + "\n")
    (out / "dir").mkdir()
    (out / "dir/victim").write_text("victim\n")
    return h, out


def _replace_with_link(path: Path, target: str | Path) -> None:
    path.unlink()
    path.symlink_to(target)


def _check(h: Host, tmp_path: Path, before: Mapping[str, object], *results: object, nlink: bool = True) -> None:
    assert snapshot(tmp_path, skip=(h.run_dir,), nlink=nlink) == before, "changed something outside RUN_DIR"
    for done in results:
        text = f"{getattr(done, 'stdout', '')}{getattr(done, 'stderr', '')}"
        assert "Traceback" not in text, text
        assert SECRET not in text, "printed a file from outside the roots"
    assert h.tool_calls() == []


def test_proc_and_sys_links_out_and_fifos(tmp_path: Path) -> None:
    h, out = _setup(tmp_path)
    _replace_with_link(h.root / "proc/modules", "../" * 10 + "outside/secret")
    _replace_with_link(h.root / "sys/module/nvidia/srcversion", out / "secret")
    version = h.root / "proc/driver/nvidia/version"
    version.unlink()
    os.mkfifo(version)  # a blocking open/read would hang status and init forever
    (h.root / "proc/cmdline").unlink()
    os.mkfifo(h.root / "proc/cmdline")
    before = snapshot(tmp_path, skip=(h.run_dir,))
    status = h.run("status", timeout=60)
    init = h.run("init", "--no-wait", timeout=60)
    assert status.returncode in (0, 1) and init.returncode in (0, 1), (status.stderr, init.stderr)
    _check(h, tmp_path, before, status, init)
    # The links resolve inside PROCFS_ROOT/SYSFS_ROOT (chroot semantics): missing, never the outside file;
    # the FIFO is reported as not a regular file instead of blocking.
    assert "proc/driver/nvidia/version" in status.stdout and "not a regular file" in status.stdout


def test_hostile_previous_driver_root(tmp_path: Path) -> None:
    """A previous DRIVER_ROOT whose directories link out and whose files are hard links to outside."""
    h, out = _setup(tmp_path)
    root = h.driver_root
    (root / "usr/lib").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu").symlink_to(out / "dir")
    (root / "lib").symlink_to("../" * 10 + "outside/dir")
    (root / "usr/bin").mkdir()
    os.link(out / "dir/victim", root / "usr/bin/nvidia-smi")
    (root / "etc").mkdir()
    (root / "etc/ld.so.cache").symlink_to(out / "secret")
    # Link counts of outside files may drop (the hard link inside DRIVER_ROOT is replaced); content,
    # type and mode must not change.
    before = snapshot(tmp_path, skip=(h.run_dir,), nlink=False)
    done = h.run("init", "--no-wait", timeout=90)
    assert done.returncode in (0, 1), done.stderr
    _check(h, tmp_path, before, done, nlink=False)
    if done.returncode == 0:
        assert (root / "usr/lib/x86_64-linux-gnu").is_dir() and not (root / "usr/lib/x86_64-linux-gnu").is_symlink()
        assert os.stat(root / "usr/bin/nvidia-smi").st_ino != os.stat(out / "dir/victim").st_ino


def _markers(tmp_path: Path) -> list[Path]:
    return [tmp_path / f"pwned{i}" for i in range(4)]


def _hostile_conf(tmp_path: Path) -> str:
    m = _markers(tmp_path)
    return (
        f'NVreg_RegistryDwords="RMFoo=1;$(touch {m[0]})"\n'
        f"NVreg_TemporaryFilePath='/var/tmp/a b `touch {m[1]}`'\n"
        f"NVreg_EnableGpuFirmware=1;touch$IFS{m[2]} # ; touch {m[3]}\n"
    )


def test_parameter_values_never_reach_a_shell(tmp_path: Path) -> None:
    h, _out = _setup(tmp_path)
    (h.root / "drivers/nvidia.conf").write_text(_hostile_conf(tmp_path))
    before = snapshot(tmp_path, skip=(h.run_dir,))
    status = h.run("status", timeout=60)
    init = h.run("init", "--no-wait", timeout=90)
    _check(h, tmp_path, before, status, init)
    assert [m for m in _markers(tmp_path) if m.exists()] == []
    # On Talos the ConfigMap is never applied: init goes on, and its warnings quote the values verbatim.
    assert init.returncode == 0, init.stderr
    assert "NVreg_RegistryDwords" in init.stderr and "on Talos that ConfigMap is never applied" in init.stderr


def test_parameter_values_are_single_argv_words_for_modprobe(tmp_path: Path) -> None:
    params = parse_module_conf(_hostile_conf(tmp_path), source="nvidia.conf")
    m = _markers(tmp_path)
    assert params == [
        ("NVreg_RegistryDwords", f"RMFoo=1;$(touch {m[0]})"),
        ("NVreg_TemporaryFilePath", f"/var/tmp/a b `touch {m[1]}`"),
        ("NVreg_EnableGpuFirmware", f"1;touch$IFS{m[2]}"),
    ]
    argv = build_modprobe_argv("nvidia", params, "595.91.07")
    assert argv[:5] == ["modprobe", "nvidia", *(f"{k}={v}" for k, v in params)]
    done = Runner().run(["printf", "%s\\n", *argv[2:5]])  # the runner passes argv to exec, no shell
    assert done.stdout.splitlines() == argv[2:5]
    assert [p for p in m if p.exists()] == []


@pytest.mark.parametrize(
    "digest", ["sha256-a\nb", "x; touch {m}", "$(touch {m})", "a\n\nRUN_DIR=/\n", "`touch {m}` \t sp ace"]
)
def test_config_digest_with_newlines_and_metacharacters(tmp_path: Path, digest: str) -> None:
    h, _out = _setup(tmp_path)
    marker = tmp_path / "pwned-digest"
    value = digest.format(m=marker)
    before = snapshot(tmp_path, skip=(h.run_dir,))
    done = h.run("init", "--no-wait", DRIVER_CONFIG_DIGEST=value, timeout=90)
    _check(h, tmp_path, before, done)
    assert not marker.exists()
    assert done.returncode in (0, 2), done.stderr  # stored verbatim, or refused as a usage error
    if done.returncode == 0:
        # settings/ strips surrounding whitespace; the rest is stored byte for byte, in RUN_DIR only.
        assert (h.run_dir / "nvidia-driver.state").read_text() == value.strip()
        assert not (Path("/") / "RUN_DIR=").exists()


def test_paths_with_spaces_newlines_and_metacharacters(tmp_path: Path) -> None:
    """RUN_DIR and USERSPACE_ROOT named like shell code: used as plain paths, never evaluated."""
    h, _out = _setup(tmp_path)
    marker = h.base / "pwned-path"  # a shell would create it in the working directory, h.base
    odd = "run dir $(touch pwned-path) `touch pwned-path`;|&\nx"
    userspace = h.userspace.rename(h.base / "user space $(touch pwned-path)")
    before = snapshot(tmp_path, skip=(h.base / odd, userspace))
    done = h.run("init", "--no-wait", RUN_DIR=str(h.base / odd), USERSPACE_ROOT=str(userspace), timeout=90)
    assert done.returncode == 0, done.stderr
    assert (h.base / odd / "driver/.driver-container/manifest.json").is_file()
    assert not marker.exists()
    assert snapshot(tmp_path, skip=(h.base / odd, userspace)) == before


def _limit_memory() -> None:
    # 1 GiB of address space: a read without a size limit fails fast (MemoryError) instead of
    # taking the machine's memory, so this test can also be run against an unfixed tree.
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.parametrize("target", ["/dev/zero", "../../../../../../../dev/zero"])
def test_driver_manager_pid_file_linked_to_dev_zero(tmp_path: Path, target: str) -> None:
    """driver-manager once read RUN_DIR/nvidia-driver.pid through a link, unbounded."""
    import subprocess
    import sys

    h, _out = _setup(tmp_path)
    h.run_dir.mkdir(parents=True, exist_ok=True)
    (h.run_dir / "nvidia-driver.pid").symlink_to(target)
    env = {
        **h.env,
        "NODE_NAME": "node-1",
        "OPERATOR_NAMESPACE": "gpu-operator",
        "KUBECONFIG": str(tmp_path / "missing-kubeconfig"),
    }
    code = "import sys; from driver_container.cli.manager_cmd import main; main(sys.argv[1:])"
    done = subprocess.run(
        [sys.executable, "-c", code, "uninstall_driver"],
        env=env,
        cwd=h.base,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=_limit_memory,
    )
    # It gets past reading the node (pid file included) to the API configuration, which is missing here.
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr
    assert "driver-manager: error: KUBECONFIG=" in done.stderr, done.stderr


def test_hostile_pci_tree(tmp_path: Path) -> None:
    """bus/pci/devices entries that loop, leave the root, hold a FIFO or a huge file: status and init finish,
    read nothing outside, and the one sound GPU is still seen."""
    h, out = _setup(tmp_path)
    devices = h.root / "sys/bus/pci/devices"
    devices.mkdir(parents=True)
    gpu = h.root / "sys/devices/pci0000:00/0000:01:00.0"
    gpu.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("device", "0x1b38"), ("class", "0x030200")):
        (gpu / name).write_text(value + "\n")
    (devices / "0000:01:00.0").symlink_to("../../../devices/pci0000:00/0000:01:00.0")
    (devices / "0000:02:00.0").symlink_to("0000:02:00.0")  # a loop
    (devices / "0000:03:00.0").symlink_to("../" * 5 + "outside/dir")  # exactly to h/outside: stays inside
    for name, value in (("vendor", "0x10de"), ("device", "0x2901"), ("class", "0x030200")):
        (out / "dir" / name).write_text(value + "\n")  # a B200, were anything read out there
    fifo = h.root / "sys/devices/pci0000:00/0000:04:00.0"
    fifo.mkdir()
    os.mkfifo(fifo / "vendor")  # a blocking open would hang every start
    (devices / "0000:04:00.0").symlink_to("../../../devices/pci0000:00/0000:04:00.0")
    huge = h.root / "sys/devices/pci0000:00/0000:05:00.0"
    huge.mkdir()
    (huge / "vendor").write_text("0x10de" + " " * 100_000)
    (devices / "0000:05:00.0").symlink_to("../../../devices/pci0000:00/0000:05:00.0")
    before = snapshot(tmp_path, skip=(h.run_dir,))
    status = h.run("status", timeout=60)
    init = h.run("init", "--no-wait", timeout=60)
    _check(h, tmp_path, before, status, init)
    # A 595 driver: the P40's last branch is 580 (findings/gpus.py DRIVER_DROPPED_GPU).
    assert "DRIVER_DROPPED_GPU" in status.stdout and "10de:1b38 (Pascal) at 0000:01:00.0" in status.stdout
    assert "0000:03:00.0" not in status.stdout and "10de:2901" not in status.stdout
    assert init.returncode == 1 and "DRIVER_DROPPED_GPU" in init.stderr
