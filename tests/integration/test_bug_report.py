"""``nvidia-driver bug-report`` as a process on a fixture Talos host (helpers.hostenv): the archive on
stdout for ``kubectl exec ... -o - > report.tar.gz``, the file form, and init's own log copy it carries."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import tarfile
from pathlib import Path

from helpers.hostenv import Host, make_host

TOP = "nvidia-driver-bug-report"
KMSG = b"6,1201,5690716,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  595.91.07\n"


def _host(tmp_path: Path) -> Host:
    host = make_host(tmp_path)
    (tmp_path / "kmsg").write_bytes(KMSG)
    host.env["KMSG_PATH"] = str(tmp_path / "kmsg")  # never the machine's /dev/kmsg
    return host


def _run_binary(host: Host, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(host.argv(*args), env=host.env, cwd=host.base, capture_output=True, timeout=120, check=False)


def _files(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {
            m.name.removeprefix(f"{TOP}/"): tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
        }


def test_stdout_carries_the_archive_and_nothing_else(tmp_path: Path) -> None:
    host = _host(tmp_path)
    init = host.run("init", "--no-wait")
    assert init.returncode == 0, init.stderr
    status = host.run("status", "--json")
    done = _run_binary(host, "bug-report", "-o", "-")
    assert done.returncode == 0, done.stderr
    files = _files(done.stdout)  # the bytes on stdout are one valid tar.gz, whole
    assert files["status.json"].decode() == status.stdout  # exactly what `status --json` prints
    assert json.loads(files["verification.json"])["ok"] is True
    assert json.loads(files["driver-root/manifest.json"])["version"] == "595.91.07"
    assert b"Done (--no-wait): driver root published" in files["run/nvidia-driver.log"]
    assert b"NVRM: loading" in files["kernel/nvidia-messages.txt"]
    # logs went to stderr only
    assert b"bytes written to stdout" in done.stderr
    assert b"INFO" not in done.stdout and b"bytes written" not in done.stdout


def test_init_keeps_its_log_status_does_not(tmp_path: Path) -> None:
    host = _host(tmp_path)
    assert host.run("status").returncode in (0, 1)
    assert not (host.run_dir / "nvidia-driver.log").exists()
    assert host.run("init", "--no-wait").returncode == 0
    assert "Done (--no-wait)" in (host.run_dir / "nvidia-driver.log").read_text()


def test_a_file_is_written_atomically_and_a_planted_symlink_replaced_not_followed(tmp_path: Path) -> None:
    host = _host(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    target = tmp_path / "out" / "report.tar.gz"
    target.parent.mkdir()
    target.symlink_to(victim)
    done = host.run("bug-report", "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "untouched\n"
    st = os.lstat(target)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert "index.json" in _files(target.read_bytes())
    assert sorted(os.listdir(target.parent)) == ["report.tar.gz"]  # no temporary left


def test_the_default_output_is_in_the_current_directory(tmp_path: Path) -> None:
    host = _host(tmp_path)
    done = host.run("bug-report", "--no-nvidia-bug-report")
    assert done.returncode == 0, done.stderr
    (written,) = [p for p in host.base.iterdir() if p.name.startswith("nvidia-driver-bug-report-")]
    assert written.name.endswith(".tar.gz") and "index.json" in _files(written.read_bytes())


def test_bad_bounds_are_usage_errors(tmp_path: Path) -> None:
    host = _host(tmp_path)
    done = host.run("bug-report", "-o", "-", "--max-size", "10")
    assert done.returncode == 2 and "--max-size 10: at least" in done.stderr
    assert host.run("bug-report", "-o", "-", "--timeout", "0").returncode == 2
