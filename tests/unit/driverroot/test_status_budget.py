"""``status --verify`` within one budget: the root's proof (an exec of the published static ldconfig) and
the hashing share one deadline (lifecycle/status.py, runtime/deadline.py); the hashing gets what the
proof left, and says where it stopped. Before, each had its own 10 s: a hung proof binary and a large
root made ``status --verify`` take 20 s."""

from __future__ import annotations

import hashlib
import re
import shutil
import time
from pathlib import Path

from helpers.support import FIXTURES, fixture_paths

from driver_container.base.paths import HostPaths
from driver_container.driverroot.integrity import check_integrity
from driver_container.driverroot.manifest import Manifest, Record, format_manifest
from driver_container.driverroot.proof import PROOF_BINARY
from driver_container.lifecycle.status import collect_status
from driver_container.runtime.deadline import Deadline
from driver_container.settings import Settings

HOST = FIXTURES / "hosts" / "talos-1.13-open-595"
LIBDIR = "usr/lib/x86_64-linux-gnu"
# A proof binary that never ends by itself: the runner kills it at its timeout (exec: no orphan left).
HUNG_LDCONFIG = "#!/bin/sh\nexec sleep 30\n"
BUDGET_S = 0.5
LARGE_NAME = "libnvidia-large.so.595.91.07"


def _published(tmp_path: Path, *, large: int = 0) -> HostPaths:
    """A fixture host with a published root: a hung proof binary, NVML, and a manifest recording NVML and,
    with ``large``, a sparse file of that many bytes (hashed for seconds: what the proof leaves of the
    deadline, a few ms at most, cannot finish it)."""
    tree = Path(shutil.copytree(HOST, tmp_path / "tree", symlinks=True))
    paths = fixture_paths(tree, run=tmp_path / "run")
    root = paths.driver_root
    (root / ".driver-container").mkdir(parents=True)
    (root / "sbin").mkdir()
    (root / PROOF_BINARY).write_text(HUNG_LDCONFIG)
    (root / PROOF_BINARY).chmod(0o755)
    (root / LIBDIR).mkdir(parents=True)
    library = root / LIBDIR / "libnvidia-ml.so.1"
    shutil.copy2(shutil.which("ldconfig") or "/sbin/ldconfig", library)
    data = library.read_bytes()
    record = Record(f"{LIBDIR}/libnvidia-ml.so.1", "file", library.stat().st_mode & 0o7777, len(data))
    records = [record._replace(sha256=hashlib.sha256(data).hexdigest())]
    if large:
        with open(root / LIBDIR / LARGE_NAME, "wb") as sparse:
            sparse.truncate(large)
        (root / LIBDIR / LARGE_NAME).chmod(0o644)
        records.append(Record(f"{LIBDIR}/{LARGE_NAME}", "file", 0o644, large, sha256="0" * 64))
    manifest = Manifest("595.91.07", "x86_64-linux-gnu", tuple(records))
    (root / ".driver-container/manifest.json").write_text(format_manifest(manifest))
    return paths


def test_status_verify_ends_within_one_budget_for_the_proof_and_the_hashing(tmp_path: Path) -> None:
    paths = _published(tmp_path, large=1 << 30)
    started = time.monotonic()
    _state, findings, _absent = collect_status(paths, Settings(), verify=True, budget_s=BUDGET_S)
    took = time.monotonic() - started
    by_code = {f.code: f.message for f in findings}
    # The proof got the budget (not its own 10 s) and the hashing what was left of it: too little for 1 GiB.
    proof_timeout = re.search(r"timed out after ([0-9.]+) s", by_code["DRIVER_ROOT_NOT_EXECUTABLE"])
    assert proof_timeout and float(proof_timeout.group(1)) <= BUDGET_S, by_code
    stopped = by_code["PUBLISHED_FILES_PARTLY_VERIFIED"]
    assert f"budget: 4294967296 bytes, {BUDGET_S:g} s" in stopped and stopped.endswith("paths checked"), stopped
    assert "of 2 paths not checked" in stopped
    assert took < BUDGET_S + 1.0, f"status --verify took {took:.2f} s with a {BUDGET_S} s budget"


def test_the_hashing_gets_what_is_left_of_the_deadline(tmp_path: Path) -> None:
    root = _published(tmp_path).driver_root
    now = [100.0]
    deadline = Deadline(10.0, clock=lambda: now[0])
    assert check_integrity(root, deadline=deadline).checked == 1  # time left: hashed
    now[0] += 10.0  # spent by an earlier step
    report = check_integrity(root, deadline=deadline)
    assert report.checked == 0 and report.stopped.endswith("1 of 1 paths not checked") and report.ok
    assert "/ 10.0 s (budget: 4294967296 bytes, 10 s)" in report.stopped
