"""nvidia-bug-report.sh through the runner (report/bugscript.py), with stand-ins for NVIDIA's script:
when it runs, with which argv and environment, its gzip output read back, and a hang killed in time."""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from report_support import add_script, report_host

from driver_container.report.bugscript import MEMBER, OUTPUT_MEMBER, run_bug_report


def test_skipped_without_the_script_or_without_a_gpu(tmp_path: Path) -> None:
    paths = report_host(tmp_path)
    (member,) = run_bug_report(paths, 10, 1 << 20)
    assert member.name == MEMBER and member.data is None
    assert member.note.startswith("skipped: the image has no /usr/bin/nvidia-bug-report.sh")
    add_script(paths, "exit 0\n")
    shutil.rmtree(paths.procfs_root / "driver/nvidia/gpus")
    (member,) = run_bug_report(paths, 10, 1 << 20)
    assert member.note == "skipped: no GPU under /proc/driver/nvidia/gpus"


def test_its_argv_cwd_and_environment_and_its_gzip_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As NVIDIA's script does with gzip present: --output-file F writes F.gz, one gzip member per section."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-pass-me")
    paths = report_host(tmp_path)
    seen = tmp_path / "seen"
    add_script(
        paths,
        f"""printf '%s\\n' "$@" > {seen}/argv; pwd > {seen}/cwd; env > {seen}/env
echo section one | gzip -c >> "$2.gz"; echo section two | gzip -c >> "$2.gz"
echo 'Running nvidia-bug-report.sh... complete.'
""",
    )
    seen.mkdir()
    log, output = run_bug_report(paths, 30, 1 << 20)
    assert log.data == b"section one\nsection two\n" and log.note == ""
    assert output.name == OUTPUT_MEMBER and output.data == b"Running nvidia-bug-report.sh... complete.\n"
    argv = (seen / "argv").read_text().splitlines()
    work = (seen / "cwd").read_text().strip()
    assert argv == ["--output-file", f"{work}/nvidia-bug-report.log"]
    assert Path(work).name.startswith("nvidia-bug-report.") and not Path(work).exists()  # removed after
    variables = dict(line.partition("=")[::2] for line in (seen / "env").read_text().splitlines())
    assert set(variables) <= {"PATH", "LANG", "TMPDIR", "PWD", "SHLVL", "_", "OLDPWD"}, variables
    assert variables["TMPDIR"] == work  # its temporary files are in the directory removed after it


def test_a_hanging_script_and_its_children_are_killed_at_the_deadline(tmp_path: Path) -> None:
    paths = report_host(tmp_path)
    pid_file = tmp_path / "child.pid"
    add_script(
        paths,
        f"""echo partial | gzip -c >> "$2.gz"
sleep 600 & echo $! > {pid_file}
wait
""",
    )
    started = time.monotonic()
    log, _output = run_bug_report(paths, 1.5, 1 << 20)
    assert time.monotonic() - started < 5
    assert log.data == b"partial\n"  # what it wrote before the kill is kept
    assert log.note.startswith("timed out: ") and "killed" in log.note
    child = int(pid_file.read_text())
    assert _gone(child), "the script's own child survived the kill"


def test_a_log_cut_by_the_kill_keeps_what_decompresses(tmp_path: Path) -> None:
    paths = report_host(tmp_path)
    whole = gzip.compress(b"".join(b"line %d of %d\n" % (i, i * 7919 % 10007) for i in range(20000)))
    (tmp_path / "cut.gz").write_bytes(whole[: len(whole) // 2])
    add_script(paths, f'cat {tmp_path / "cut.gz"} > "$2.gz"\n')
    log, _output = run_bug_report(paths, 30, 1 << 20)
    assert log.data is not None and log.data.startswith(b"line 0 of 0\nline 1 of 7919\n")
    assert log.note == "its gzip output ends early"


def _gone(pid: int) -> bool:
    """Dead: not there, or a zombie waiting for a reaper (this container's PID 1 may not reap)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return not os.path.exists(f"/proc/{pid}")


def test_what_the_script_leaves_running_when_it_ends_is_killed_before_its_directory_goes(tmp_path: Path) -> None:
    """A child still writing into the directory would outlive the report (and could fill it again)."""
    paths = report_host(tmp_path)
    pid_file, cwd_file = tmp_path / "child.pid", tmp_path / "cwd"
    add_script(
        paths, f"pwd > {cwd_file}\n(while :; do echo x >> late; sleep 0.05; done) & echo $! > {pid_file}\nexit 0\n"
    )
    try:
        log, _output = run_bug_report(paths, 30, 1 << 20)
        assert log.note == "no log written"
        assert _gone(int(pid_file.read_text())), "the script's background child outlived the report"
        assert not Path(cwd_file.read_text().strip()).exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
