"""Files changed behind our back in DRIVER_ROOT (docs/status.md): ``status --verify`` hashes every published file
and compares it with the manifest; ``init`` checks once after Ready and ``status`` reports what it found.
An image index that lies (same size and mtime, another digest) is caught the same way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers.hostenv import Host, make_host

from driver_container.formats.userspace_layout import DIGEST_INDEX

VERSION = "595.91.07"
LIB = f"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{VERSION}"
READY_LINE = "Done, now waiting for signal"


def _status(h: Host, *args: str) -> tuple[int, list[dict[str, str]]]:
    done = h.run("status", "--json", *args)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)["findings"]


def _codes(findings: list[dict[str, str]]) -> list[str]:
    return [f["code"] for f in findings]


def _published(tmp_path: Path) -> Host:
    h = make_host(tmp_path / "h")
    done = h.run("init", "--no-wait")
    assert done.returncode == 0, done.stderr
    return h


def test_verify_reports_a_library_changed_with_its_size_and_mtime_kept(tmp_path: Path) -> None:
    h = _published(tmp_path)
    code, findings = _status(h, "--verify")
    assert code == 0 and "PUBLISHED_FILES_VERIFIED" in _codes(findings), findings
    lib = h.driver_root / LIB
    st = lib.stat()
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    os.chmod(lib, 0o644)
    lib.write_bytes(bytes(data))
    os.chmod(lib, st.st_mode & 0o7777)
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the mtime restored: only the content tells
    code, findings = _status(h, "--verify")
    changed = [f for f in findings if f["code"] == "PUBLISHED_FILE_CHANGED"]
    assert code == 1 and changed, findings
    assert LIB in changed[0]["message"] and "content differs" in changed[0]["message"]
    assert _status(h)[0] == 0  # without --verify nothing is hashed (and no check after Ready was made)


def test_verify_reports_a_deleted_file_and_one_replaced_by_a_symlink(tmp_path: Path) -> None:
    h = _published(tmp_path)
    smi = h.driver_root / "usr/bin/nvidia-smi"
    smi.unlink()
    lib = h.driver_root / LIB
    lib.unlink()
    lib.symlink_to("/etc/passwd")
    code, findings = _status(h, "--verify")
    message = next(f["message"] for f in findings if f["code"] == "PUBLISHED_FILE_CHANGED")
    assert code == 1
    assert "usr/bin/nvidia-smi: missing" in message and f"{LIB}: a symlink, not a file" in message


def _lying_index(h: Host) -> None:
    """Index the userspace as the image build does, then give the NVML library another digest."""
    done = h.run("index-userspace", "--version", VERSION)
    assert done.returncode == 0, done.stderr
    index = h.userspace / DIGEST_INDEX
    text = index.read_text()
    lines = [line for line in text.splitlines() if f'libnvidia-ml.so.{VERSION}"' in line]
    assert len(lines) == 1, text
    entry = json.loads(lines[0].rstrip(","))
    index.write_text(text.replace(entry["sha256"], "0" * 64))


def test_the_check_after_ready_catches_an_index_that_lies_and_status_reports_it(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    _lying_index(h)
    proc = subprocess.Popen(
        h.argv("init"), env=h.env, cwd=h.base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        record = h.run_dir / "nvidia-driver.verify.json"
        deadline = time.monotonic() + 60
        while not record.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "no check after Ready"
            time.sleep(0.1)
        time.sleep(0.3)  # the parent collects the child's result
        rss_kb = next(
            int(line.split()[1])
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
            if line.startswith("VmRSS:")
        )
        assert rss_kb < 30 * 1024, f"waiting init grew to {rss_kb} KiB"
        body = json.loads(record.read_text())
        assert body["total_mismatches"] == 1 and body["mismatches"][0]["path"] == LIB, body
        assert (h.run_dir / "validations/.driver-daemons-status").read_text() == "Ready"  # no flapping
        code, findings = _status(h)
        assert code == 1 and "PUBLISHED_FILE_CHANGED" in _codes(findings), findings
        assert "checked after Ready" in next(f["message"] for f in findings if f["code"] == "PUBLISHED_FILE_CHANGED")
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "differ from the manifest" in err and "1 of " in err and "ERROR" in err
    # A new publish (the file rewritten from its source) makes the record stale: no finding is left.
    (h.userspace / DIGEST_INDEX).unlink()
    (h.driver_root / LIB).unlink()
    assert h.run("init", "--no-wait").returncode == 0
    assert "PUBLISHED_FILE_CHANGED" not in _codes(_status(h)[1])


@pytest.mark.timeout(120)
def test_sigterm_right_after_ready_stops_init_promptly(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    proc = subprocess.Popen(
        h.argv("init"), env=h.env, cwd=h.base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    status = h.run_dir / "validations/.driver-daemons-status"
    deadline = time.monotonic() + 60
    while not (status.exists() and status.read_text() == "Ready"):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 3.0, err
    assert proc.returncode == 0, err
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=False)
    assert children.stdout == ""
