"""Signals, forked children and the budget of a check, attacked: each test failed before its fix.

- An orphan: SIGTERM while the publisher's ``ldconfig`` runs; the tool must be gone, and write nothing,
  once ``init`` has exited (the publisher leads a process group that is killed whole).
- A bug in a forked child: one line at error level, never a traceback in the log ``bug-report`` archives.
- SIGINT at any point of any command, also before ``init`` installs its handlers: ends the command as
  SIGTERM does (by the signal, no traceback, no click "Aborted!").
- ``status --verify`` on a root grown to 20 GiB (a sparse file, its record edited to match): stopped at
  the budget (4 GiB, 10 s) with a finding that says so, not hashed for a minute.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import tomllib
from pathlib import Path

import pytest
from helpers.fakes import add_fabric_to_image, fabric_env
from helpers.hostenv import make_host
from helpers.support import REPO, require

from driver_container.base.errors import CommandStopped
from driver_container.driverroot.integrity import IntegrityBudget, check_integrity
from driver_container.runtime.runner import Runner
from driver_container.runtime.supervise import BackgroundChild, Shutdown
from driver_container.runtime.timedchild import TIMED_OUT, run_until

MANIFEST = ".driver-container/manifest.json"
# A static ldconfig in the image (so the one on PATH only runs), and on PATH one that never ends: it
# records its pid, then writes into the staging area (its -C cache) and a log outside, every 20 ms.
SLOW_LDCONFIG = """#!/bin/sh
root=""; cache=""
while [ $# -gt 0 ]; do
  case "$1" in -r) root="$2"; shift;; -C) cache="$2"; shift;; esac
  shift
done
echo $$ >"$LDCONFIG_MARK.pid"
while :; do
  echo x >>"$LDCONFIG_MARK.writes"
  echo x >"$root$cache.late" 2>/dev/null
  sleep 0.02
done
"""
# Loaded by every Python process of a test that sets PAUSE_AT_IMPORT: the import of that module writes
# PAUSE_MARK, then sleeps, so a signal lands at a known point of the command's start.
SITECUSTOMIZE = """
import os, sys, time
class _Pause:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["PAUSE_AT_IMPORT"]:
            sys.meta_path.remove(self)
            open(os.environ["PAUSE_MARK"], "w").close()
            # Short sleeps: a signal that lands between the mark and a long sleep's syscall would wait
            # for the whole sleep (CPython runs a handler between bytecodes, PEP 475 resumes the sleep).
            for _ in range(2000):
                time.sleep(0.01)
        return None
if os.environ.get("PAUSE_AT_IMPORT"):
    sys.meta_path.insert(0, _Pause())
"""


def _wait_for(path: Path, proc: subprocess.Popen[str], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not path.exists():
        assert proc.poll() is None, f"ended before {path.name} was written: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{path.name} not written in {within} s"
        time.sleep(0.005)


def _gone(pid: int) -> bool:
    """No such process, or a zombie (it runs no more code)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state == "Z"


def _mtimes(root: Path) -> dict[str, int]:
    return {str(p): p.lstat().st_mtime_ns for p in root.rglob("*")}


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.timeout(120)
def test_sigterm_during_ldconfig_leaves_no_orphan_writing_into_staging(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    real = shutil.which("ldconfig") or "/sbin/ldconfig"
    require(Path(real).exists(), "a static ldconfig", how="apt-get install libc-bin")
    (h.userspace / "sbin").mkdir(exist_ok=True)
    shutil.copy(real, h.userspace / "sbin/ldconfig.real")
    fake = h.base / "bin/ldconfig"
    fake.write_text(SLOW_LDCONFIG)
    fake.chmod(0o755)
    mark = tmp_path / "ldconfig"
    proc = h.start("init", "--no-wait", LDCONFIG_MARK=str(mark))
    _wait_for(mark.with_suffix(".pid"), proc)
    while _lines(mark.with_suffix(".writes")) < 3:  # it is writing
        time.sleep(0.005)
    pid = int(mark.with_suffix(".pid").read_text())
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert proc.returncode == 0, err
    assert took < 2.0, f"SIGTERM answered after {took:.2f} s"
    assert "Traceback" not in err
    assert _gone(pid), f"ldconfig (pid {pid}) still runs after init exited"
    writes, staged = _lines(mark.with_suffix(".writes")), _mtimes(h.driver_root)
    time.sleep(0.3)  # 15 of its writes
    assert _lines(mark.with_suffix(".writes")) == writes, "ldconfig wrote after init exited"
    assert _mtimes(h.driver_root) == staged, "a file in DRIVER_ROOT written after init exited"


CHILD_BUG = """
import sys
from pathlib import Path
from driver_container import logs
from driver_container.base.errors import DriverContainerError
from driver_container.runtime.logfile import keep_log
from driver_container.runtime.supervise import BackgroundChild, run_in_child
from driver_container.runtime.timedchild import run_until
logs.configure(json_format=False, verbose=sys.argv[2] == "verbose")
keep_log(Path(sys.argv[1]))
def bug():
    return {}["a key\\nwith a second line"]
try:
    run_in_child(bug)
except DriverContainerError as exc:
    print("publisher:", exc.message, "|", exc.fix)
print("timed:", run_until(bug, 30)[1].message)
child = BackgroundChild(bug, "background check")
while not child.collect():
    pass
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_a_bug_in_a_forked_child_is_one_line_never_a_traceback(tmp_path: Path, verbose: bool) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", CHILD_BUG, str(run_dir), "verbose" if verbose else "quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 0, done.stderr
    line = "internal error: KeyError: 'a key"
    assert f"publisher: {line}" in done.stdout and f"timed: {line}" in done.stdout
    assert "--verbose" in done.stdout  # the fix names how to get the traceback
    log = (run_dir / "nvidia-driver.log").read_text()
    for text in (done.stderr, log):
        errors = [x for x in text.splitlines() if "ERROR" in x]
        assert len(errors) == 3 and all(line in x and "(in the forked child, pid" in x for x in errors), text
        assert "background check failed: internal error: KeyError" in text
        # the traceback only when asked for (debug level, --verbose), never in the default log
        assert ("Traceback" in text) == verbose, text


def _entry(script: str) -> str:
    """``python -c`` doing what the console script ``script`` does (pyproject's [project.scripts])."""
    target = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"][script]
    module, function = target.split(":")
    return f"import sys; sys.argv[0] = {script!r}; from {module} import {function}; {function}()"


# (console script, its arguments, the import to pause at): before typer, inside a command body (click
# turned a KeyboardInterrupt there into "Aborted!", exit 1), the probe, driver-manager's and a companion's
# start, and init before its handlers are installed.
SIGINT_POINTS = [
    ("nvidia-driver", ["status"], "typer"),
    ("nvidia-driver", ["status"], "driver_container.lifecycle.status"),
    ("nvidia-driver", ["modinfo", "nvidia"], "typer"),
    ("nvidia-driver", ["bug-report"], "driver_container.report.collect"),
    ("nvidia-driver", ["init", "--no-wait"], "driver_container.lifecycle.init"),
    ("nvidia-driver", ["probe_nvidia_peermem"], "driver_container.lifecycle.peermem_glance"),
    ("driver-manager", ["uninstall_driver"], "typer"),
    ("nvidia-gds-driver", ["install"], "driver_container.lifecycle.companion"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("script", "args", "pause_at"), SIGINT_POINTS, ids=str)
def test_sigint_at_any_point_ends_a_command_as_sigterm_does(
    tmp_path: Path, script: str, args: list[str], pause_at: str
) -> None:
    h = make_host(tmp_path / "h")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    ended = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        mark = tmp_path / f"paused-{signum}"
        env = {
            **h.env,
            "PAUSE_AT_IMPORT": pause_at,
            "PAUSE_MARK": str(mark),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(site), h.env.get("PYTHONPATH")])),
        }
        # SIGINT at its default, as the kubelet starts a probe or a container: a shell's background job
        # (CI started with `&`) inherits SIGINT ignored, and the probe's fast path keeps what it inherits.
        entry = f"import signal; signal.signal(signal.SIGINT, signal.SIG_DFL); {_entry(script)}"
        proc = subprocess.Popen(
            [sys.executable, "-c", entry, *args],
            env=env,
            cwd=h.base,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_for(mark, proc)
        sent = time.monotonic()
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=30)
        assert time.monotonic() - sent < 2.0
        assert "Traceback" not in err and "KeyboardInterrupt" not in err and "Aborted" not in err, err
        ended[signum] = proc.returncode
    # Killed by the signal it got, as a process with the default action ends: 128+N to a shell.
    assert ended == {signal.SIGTERM: -signal.SIGTERM, signal.SIGINT: -signal.SIGINT}


def _sparse_in_place_of(root: Path, size: int) -> str:
    """A published file replaced by a sparse ``size``-byte file, its manifest record edited to match
    (size only: the content is not what was published, so a full hash would find it)."""
    manifest = root / MANIFEST
    doc = json.loads(manifest.read_text())
    record = max((r for r in doc["files"] if r["type"] == "file"), key=lambda r: r["size"])
    with open(root / record["path"], "r+b") as f:
        f.truncate(size)
    record["size"] = size
    manifest.write_text(json.dumps(doc, indent=1))
    return str(record["path"])


@pytest.mark.timeout(120)
def test_status_verify_of_a_20_gib_sparse_file_stops_at_its_budget(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    assert h.run("init", "--no-wait").returncode == 0
    path = _sparse_in_place_of(h.driver_root, 20 << 30)
    started = time.monotonic()
    done = h.run("status", "--json", "--verify", timeout=90)
    took = time.monotonic() - started
    assert "Traceback" not in done.stderr, done.stderr
    findings = {f["code"]: f["message"] for f in json.loads(done.stdout)["findings"]}
    stopped = findings.get("PUBLISHED_FILES_PARTLY_VERIFIED", "")
    assert "verify stopped after" in stopped and "budget: 4294967296 bytes, 10 s" in stopped, findings
    assert took < 5.0, f"status --verify took {took:.1f} s with {path} grown to 20 GiB"  # over the budget: not read
    assert "PUBLISHED_FILE_CHANGED" not in findings  # nothing checked differed; what was not checked is said


def test_verify_stops_at_its_time_budget_inside_a_file(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    assert h.run("init", "--no-wait").returncode == 0
    _sparse_in_place_of(h.driver_root, 3 << 30)  # within the byte budget: read, and hashed for seconds
    started = time.monotonic()
    report = check_integrity(h.driver_root, IntegrityBudget(max_s=0.2))
    took = time.monotonic() - started
    assert took < 1.5, f"verify took {took:.2f} s with a 0.2 s budget"
    assert report.stopped.startswith("verify stopped after ") and "(budget: 4294967296 bytes, 0.2 s)" in report.stopped
    assert report.stopped.endswith("paths not checked") and report.ok
    assert 0 < report.checked < len(json.loads((h.driver_root / MANIFEST).read_text())["files"])


HUNG_NVIDIA_SMI = """#!/bin/sh
echo $$ >"$SMI_MARK"
sleep 50
"""


@pytest.mark.timeout(120)
def test_sigterm_during_a_hung_nvidia_smi_in_the_fabric_wait_is_answered_within_2_s(tmp_path: Path) -> None:
    """nvidia-smi hangs on a GPU in a bad state (60 s timeout): a SIGTERM must not wait for it."""
    h = make_host(tmp_path / "h", "talos-1.13-hgx-h100-nvswitch")
    add_fabric_to_image(h.userspace, nvlsm=False)
    smi = h.base / "bin/nvidia-smi"
    smi.write_text(HUNG_NVIDIA_SMI)
    smi.chmod(0o755)
    h.env.update(fabric_env(h.base), FABRIC_WAIT_TIMEOUT="90")
    mark = tmp_path / "smi.pid"
    proc = h.start("init", SMI_MARK=str(mark))
    _wait_for(mark, proc)
    pid = int(mark.read_text())
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.monotonic() - sent
    assert took < 2.0, f"SIGTERM answered after {took:.2f} s (nvidia-smi hung)"
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert _gone(pid), "nvidia-smi still runs after init exited"
    assert h.status() != "Ready"


@pytest.mark.parametrize("how", ["run", "exit_status"])
def test_a_stoppable_runner_kills_a_hung_command_at_a_signal(tmp_path: Path, how: str) -> None:
    """The step's runner (``init``'s) at a signal: the hung command is killed within 0.1 s and
    ``CommandStopped`` raised; without a signal the same runner returns its output."""
    hung = tmp_path / "hung"
    hung.write_text(f"#!/bin/sh\necho $$ >{tmp_path}/hung.pid\nexec sleep 30\n")
    hung.chmod(0o755)
    shutdown = Shutdown().install()
    runner = Runner().stoppable(shutdown)
    try:
        assert runner.run(["echo", "unstopped"]).stdout == "unstopped\n"
        assert runner.exit_status(["true"]) == 0
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGHUP))
        timer.start()
        started = time.monotonic()
        with pytest.raises(CommandStopped, match=r"hung: stopped by SIGHUP"):
            getattr(runner, how)([str(hung)], timeout=60)
        took = time.monotonic() - started
        timer.join()
    finally:
        shutdown.restore()
    assert (tmp_path / "hung.pid").exists()  # it had started
    assert 0.25 < took < 1.0, f"stopped after {took:.2f} s"
    assert _gone(int((tmp_path / "hung.pid").read_text()))


LOOPING_TOOL = """#!/bin/sh
echo $$ >"$1.pid"
while :; do echo x >>"$1.writes"; sleep 0.02; done
"""


@pytest.mark.parametrize("child", ["timed (bug-report)", "background (check after Ready)"])
def test_a_killed_child_takes_the_tools_it_started_with_it(tmp_path: Path, child: str) -> None:
    tool, mark = tmp_path / "tool", tmp_path / "mark"
    tool.write_text(LOOPING_TOOL)
    tool.chmod(0o755)

    def work() -> object:
        return Runner().run([str(tool), str(mark)], timeout=60)

    if child.startswith("timed"):
        kind, _value = run_until(work, 1.0)
        assert kind == TIMED_OUT
    else:
        background = BackgroundChild(work, "check")
        deadline = time.monotonic() + 30
        while _lines(mark.with_suffix(".writes")) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        background.kill()
    assert _lines(mark.with_suffix(".writes")) >= 3  # the tool ran, and wrote
    assert _gone(int(mark.with_suffix(".pid").read_text())), "the child's tool outlived it"
    writes = _lines(mark.with_suffix(".writes"))
    time.sleep(0.2)  # 10 of its writes
    assert _lines(mark.with_suffix(".writes")) == writes, "the child's tool still writes"


# An nvidia-bug-report.sh stand-in that never ends: it records its pid, working directory and a child's
# pid, writes its log, a temporary directory of its own under TMPDIR and a file there, then waits.
ENDLESS_BUG_SCRIPT = """#!/bin/sh
echo $$ >"{mark}.pid"
pwd >"{mark}.cwd"
echo partial | gzip -c >>"$2.gz"
mkdir "${{TMPDIR:-.}}/own-temp" && echo x >"${{TMPDIR:-.}}/own-temp/file"
sleep 600 &
echo $! >"{mark}.child"
wait
"""


def _gone_within(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while not _gone(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("output", ["file", "stdout"])
def test_a_signal_to_bug_report_ends_nvidia_bug_report_sh_and_removes_its_directory(
    tmp_path: Path, signum: signal.Signals, output: str
) -> None:
    """nvidia-bug-report.sh runs in a session of its own: the signal that ends bug-report never reaches
    it. bug-report must kill its group and remove its directory, and write no archive, before it ends."""
    h = make_host(tmp_path / "h")
    (tmp_path / "kmsg").write_bytes(b"6,1,1,-;NVRM: loading\n")
    h.env["KMSG_PATH"] = str(tmp_path / "kmsg")
    mark = tmp_path / "script"
    script = h.userspace / "usr/bin/nvidia-bug-report.sh"
    script.write_text(ENDLESS_BUG_SCRIPT.format(mark=mark))
    script.chmod(0o755)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = ["-o", str(out_dir / "report.tar.gz")] if output == "file" else ["-o", "-"]
    temp = tmp_path / "tmp"  # bug-report's TMPDIR: its script's directory is made there
    temp.mkdir()
    proc = h.start("bug-report", "--timeout", "60", *target, TMPDIR=str(temp))
    _wait_for(mark.with_suffix(".child"), proc)
    pids = [int(mark.with_suffix(suffix).read_text()) for suffix in (".pid", ".child")]
    try:
        work = Path(mark.with_suffix(".cwd").read_text().strip())
        assert work.parent == temp and (work / "own-temp/file").exists()  # it runs, and wrote
        assert all(not _gone(pid) for pid in pids)
        sent = time.monotonic()
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
        assert proc.returncode == -signum, err  # ended by the signal it got: the signal landed
        assert took < 2.0, f"{signum.name} answered after {took:.2f} s"
        assert "Traceback" not in err, err
        assert [pid for pid in pids if not _gone_within(pid)] == [], "nvidia-bug-report.sh or its child outlived it"
        assert list(temp.iterdir()) == [], "its directory was left behind"
        assert list(out_dir.iterdir()) == []  # no archive, no temporary of one
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pids[0], signal.SIGKILL)  # the test's own stand-in, when bug-report left it running
