"""The image's digest index (docs/image.md): a first publish takes each indexed file's sha256 and ELF facts from
it (copied in the kernel, no ELF header parsed, pyelftools not even imported), trusts no entry whose size
or mtime differs, and ignores a damaged or hostile index with a warning (every file hashed, as without)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.support import SYNTHETIC_VERSION, require

from driver_container.base.paths import HostPaths
from driver_container.driverroot.index import UserspaceIndex, parse_index, read_index, same_mtime
from driver_container.driverroot.manifest import read_manifest
from driver_container.formats.userspace_layout import DIGEST_INDEX
from driver_container.publish.index_build import build_index
from driver_container.publish.publisher import publish_driver_root
from driver_container.runtime.runner import Runner

LIB = f"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{SYNTHETIC_VERSION}"
PUBLISH = """
import json, sys
from pathlib import Path
from driver_container.base.paths import HostPaths
from driver_container.publish.publisher import publish_driver_root
from driver_container.runtime.runner import Runner
publish_driver_root(HostPaths(userspace_root=Path(sys.argv[1]), driver_root_override=Path(sys.argv[2]),
                    run_dir=Path(sys.argv[2]).parent / "run", procfs_root=Path("/nonexistent")), sys.argv[3], Runner())
print(json.dumps({"elftools": "elftools" in sys.modules}))
"""


def _with_static_ldconfig(userspace: Path) -> None:
    """As in the image: a static ldconfig inside the root (else the one on PATH, outside it, is hashed)."""
    real = shutil.which("ldconfig") or "/sbin/ldconfig"
    require(Path(real).exists(), "a static ldconfig", how="apt-get install libc-bin")
    (userspace / "sbin").mkdir(exist_ok=True)
    shutil.copy(real, userspace / "sbin/ldconfig.real")


def _paths(userspace: Path, tmp_path: Path) -> HostPaths:
    return HostPaths(userspace_root=userspace, driver_root_override=tmp_path / "driver", run_dir=tmp_path / "run")


def _counted(caplog: pytest.LogCaptureFixture) -> str:
    return next(r.getMessage() for r in caplog.records if "digests from the image index" in r.getMessage())


def test_an_indexed_first_publish_hashes_nothing_parses_nothing_and_records_true_digests(
    userspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _with_static_ldconfig(userspace)
    summary = build_index(HostPaths(userspace_root=userspace).userspace, SYNTHETIC_VERSION, Runner())
    assert summary.files > 10 and summary.elf > 5
    done = subprocess.run(
        [sys.executable, "-c", PUBLISH, str(userspace), str(tmp_path / "sub"), SYNTHETIC_VERSION],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == {"elftools": False}, done.stderr
    caplog.set_level(logging.INFO, logger="driver_container")
    publish_driver_root(_paths(userspace, tmp_path), SYNTHETIC_VERSION, Runner())
    message = _counted(caplog)
    copied = int(message.split(" of ")[1].split()[0])
    assert message.startswith(f"{copied} of {copied} files'") and "(0 hashed)" in message
    _text, manifest = read_manifest(tmp_path / "driver")
    assert manifest is not None
    for rec in manifest.records:
        if rec.type == "file":
            assert hashlib.sha256((tmp_path / "driver" / rec.path).read_bytes()).hexdigest() == rec.sha256, rec.path


def test_an_entry_whose_mtime_or_size_differs_is_hashed(
    userspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _with_static_ldconfig(userspace)
    build_index(HostPaths(userspace_root=userspace).userspace, SYNTHETIC_VERSION, Runner())
    lib = userspace / f"usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.{SYNTHETIC_VERSION}"
    st = lib.stat()
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a later second: another file
    caplog.set_level(logging.INFO, logger="driver_container")
    publish_driver_root(_paths(userspace, tmp_path), SYNTHETIC_VERSION, Runner())
    message = _counted(caplog)
    assert "(1 hashed)" in message, message


def test_mtimes_cut_to_whole_seconds_by_a_layer_tar_still_match() -> None:
    recorded = 1_774_451_552_123_456_789
    assert same_mtime(recorded, recorded)
    assert same_mtime(recorded, 1_774_451_552_000_000_000)  # a tar without sub-second times
    assert not same_mtime(recorded, 1_774_451_553_000_000_000)  # rounded up: not the recorded second
    assert not same_mtime(recorded, recorded + 1)
    assert not same_mtime(1_774_451_552_000_000_000, 1_774_451_552_000_000_001)


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b'{"format": 2, "version": "x", "files": []}',
        b'{"format": 1, "version": "x", "files": [{"path": "../../etc/passwd", "size": 1, "mtime_ns": 1,'
        b' "sha256": "' + b"0" * 64 + b'"}]}',
        b'{"format": 1, "version": "x", "files": [{"path": "/abs", "size": 1, "mtime_ns": 1, "sha256": "00"}]}',
        b'{"format": 1, "version": "x", "files": [{"path": "a", "size": -1, "mtime_ns": 1, "sha256": "00"}]}',
        b'{"format": 1, "version": "x", "files": [{"path": "a", "size": true, "mtime_ns": 1, "sha256": "00"}]}',
        b"\xff\xfe",
    ],
)
def test_a_damaged_or_hostile_index_is_ignored_with_a_warning(
    userspace: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    (userspace / DIGEST_INDEX).parent.mkdir(parents=True, exist_ok=True)
    (userspace / DIGEST_INDEX).write_bytes(content)
    index = read_index(HostPaths(userspace_root=userspace).userspace)
    assert len(index) == 0
    assert any("ignoring" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_a_fifo_or_a_link_out_of_the_root_at_the_index_path_never_hangs_or_escapes(
    userspace: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = userspace / DIGEST_INDEX
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    assert len(read_index(HostPaths(userspace_root=userspace).userspace)) == 0
    path.unlink()
    outside = tmp_path / "outside.json"
    build_index(HostPaths(userspace_root=userspace).userspace, SYNTHETIC_VERSION, Runner())
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)  # absolute: resolved inside the root (as chroot would), where it does not exist
    assert len(read_index(HostPaths(userspace_root=userspace).userspace)) == 0


def test_lookup_is_by_the_real_path_below_the_root_only(tmp_path: Path) -> None:
    text = json.dumps(
        {
            "format": 1,
            "version": "1",
            "files": [{"path": "usr/lib/a.so.1", "size": 3, "mtime_ns": 5, "sha256": "a" * 64}],
        }
    )
    index = parse_index(text, tmp_path)
    assert index.lookup(tmp_path / "usr/lib/a.so.1", 3, 5) is not None
    assert index.lookup(tmp_path / "usr/lib/a.so.1", 4, 5) is None
    assert index.lookup(Path("/usr/lib/a.so.1"), 3, 5) is None
    assert UserspaceIndex(tmp_path).lookup(tmp_path / "usr/lib/a.so.1", 3, 5) is None
