"""``bug-report`` on the real published userspaces 535/550/555 (docs/bug-report.md): the archive
holds the published manifest and a fresh check of DRIVER_ROOT against it saying OK; with a published
library removed from the root, the report's check names it. Each root is the session's shared publish
(tests/integration/conftest.py ``published_userspaces``); the removed file is put back, same inode."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.published_roots import CLI, GRAPHICS, Published, Userspace
from helpers.trees import moved_aside

pytestmark = pytest.mark.artefact

AMD64 = tuple(u for u in GRAPHICS if u.arch == "amd64")
TOP = "nvidia-driver-bug-report"


@pytest.fixture(params=AMD64, ids=[u.name for u in AMD64])
def published(request: pytest.FixtureRequest, published_userspaces: Callable[[Userspace], Published]) -> Published:
    return published_userspaces(request.param)


def bug_report(p: Published, base: Path) -> dict[str, bytes]:
    loading = f"6,1,100,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {p.userspace.version}\n"
    (base / "kmsg").write_text(loading)
    env = p.env | {"KMSG_PATH": str(base / "kmsg")}  # never the machine's /dev/kmsg
    done = subprocess.run(
        [str(CLI), "bug-report", "-o", "-"], env=env, cwd=base, capture_output=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    with tarfile.open(fileobj=io.BytesIO(done.stdout), mode="r:gz") as tar:
        return {m.name.removeprefix(f"{TOP}/"): tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def test_the_report_holds_the_manifest_and_a_check_saying_ok(published: Published, tmp_path: Path) -> None:
    files = bug_report(published, tmp_path)
    manifest = json.loads(files["driver-root/manifest.json"])
    assert manifest["version"] == published.userspace.version
    check = json.loads(files["verification.json"])
    assert check["ok"] is True and check["mismatches"] == []
    assert check["checked"] == len(manifest["files"]) and check["version"] == published.userspace.version
    status = json.loads(files["status.json"])
    assert status["driver_root"]["published"] is True and status["userspace"]["version"] == published.userspace.version
    assert b"NVRM: loading" in files["kernel/nvidia-messages.txt"]
    assert b"Done (--no-wait)" in files["run/nvidia-driver.log"]  # init's own log, kept in RUN_DIR
    index = {m["name"]: m for m in json.loads(files["index.json"])["members"]}
    # Debian's graphics trees have no nvidia-bug-report.sh (nvidia-driver-bin is not unpacked)
    assert index["nvidia-bug-report/nvidia-bug-report.log"]["note"].startswith("skipped: the image has no")


def test_a_library_removed_from_the_root_is_named_by_the_check(published: Published, tmp_path: Path) -> None:
    relative = f"usr/lib/{published.userspace.triplet}/libnvidia-ml.so.{published.userspace.version}"
    with moved_aside(published.driver_root / relative):
        files = bug_report(published, tmp_path)
    check = json.loads(files["verification.json"])
    assert check["ok"] is False
    assert {"path": relative, "reason": "missing"} in check["mismatches"]
