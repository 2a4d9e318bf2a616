"""What a SIGKILL between fsutil.atomic_write_text's temporary write and its rename leaves behind must
be gone after the next init (found by test_faults_kill.py).

KNOWN BUG (owner: publish/ - publish_driver_root): ``apply._sweep_temporaries`` sweeps only the parent
directories of planned entries, never DRIVER_ROOT/.driver-container/, where ``atomic_write_text``
(tempfile.mkstemp(prefix=".manifest.json.", suffix=".tmp")) stages the manifest; a kill inside that
write leaves ``.driver-container/.manifest.json.XXXXXXXX.tmp`` forever. Fix: sweep ``MANIFEST_PATH.parent``
for ``.manifest.json.*.tmp`` too. When it is fixed this strict xfail turns into a failure: remove the
marker and KNOWN_LEFTOVER in test_faults_kill.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hostenv import make_host
from rootcmp import MANIFEST

# The one leftover test_faults_kill.py tolerates until the bug above is fixed.
KNOWN_LEFTOVER = re.compile(r"\.driver-container/\.manifest\.json\.[^/]+\.tmp")


@pytest.mark.xfail(strict=True, reason="publish does not sweep .driver-container/ for manifest temporaries")
def test_manifest_temporary_of_a_killed_write_is_removed(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    assert h.run("init", "--no-wait").returncode == 0
    manifest = h.driver_root / MANIFEST
    stale = manifest.with_name(".manifest.json.k1ll3d__.tmp")  # the name mkstemp gives it
    stale.write_text(manifest.read_text()[:40])  # torn: killed mid-write
    manifest.unlink()  # killed before the rename of the first publish
    done = h.run("init", "--no-wait")
    assert done.returncode == 0, done.stderr
    assert manifest.is_file()
    assert not stale.exists()


def test_known_leftover_pattern_matches_the_real_name() -> None:
    assert KNOWN_LEFTOVER.fullmatch(".driver-container/.manifest.json.xq0vxsh1.tmp")
    assert not KNOWN_LEFTOVER.fullmatch("usr/lib/x86_64-linux-gnu/.libcuda.so.595.91.07.dc-tmp")
