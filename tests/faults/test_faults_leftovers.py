"""What a SIGKILL between fsutil.atomic_write_text's temporary write and its rename leaves behind must
be gone after the next init (found by test_faults_kill.py): atomic_write removes the stale temporaries of
its own target before writing it again.
"""

from __future__ import annotations

from pathlib import Path

from helpers.hostenv import make_host
from helpers.rootcmp import MANIFEST


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
