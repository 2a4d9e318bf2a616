"""Damaged state files heal; RUN_DIR's own files cannot be taken over (docs/publish.md "Damaged state").

Every JSON document the program reads goes through ``formats/boundedjson``: a 10 KB document nested
thousands of levels deep (which made json.loads raise RecursionError, so ``init`` failed with "internal
error" on every start and nothing rewrote the file), a list where an object belongs, NUL bytes, invalid
UTF-8 and a file over its cap are damage: the state file is ignored with a warning naming it and
rewritten. A directory, a symlink (out of the roots, or dangling) or a FIFO where a RUN_DIR file belongs
is removed, never followed, and replaced: nothing outside RUN_DIR changes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers.hostenv import Host, make_host
from helpers.support import FIXTURES, fixture_paths
from helpers.trees import snapshot
from helpers.waits import wait_until
from hypothesis import given, settings
from hypothesis import strategies as st

from driver_container.base.errors import JsonFormatError
from driver_container.base.paths import HostPaths
from driver_container.driverroot.integrity import parse_report
from driver_container.driverroot.journal import JOURNAL
from driver_container.driverroot.manifest import MANIFEST_PATH, MAX_MANIFEST, read_manifest
from driver_container.formats.boundedjson import MAX_DEPTH, decode_json, decode_object, nesting_depth
from driver_container.formats.userspace_layout import DIGEST_INDEX
from driver_container.inspect.verdict import BOOT_ID, VERDICT_FILE, Binding, load_verdict, parse_verdict
from driver_container.manager.manager import hand_verdict_to_init
from driver_container.runtime.statusfiles import MAX_FAILURE_RECORD, PUBLISH_FAILED, read_state, write_state
from driver_container.settings import Settings

OUTSIDE = "precious: outside the roots\n"
# Each a few KiB; the first two are what made json.loads raise RecursionError on every start.
DAMAGE = {
    "deep-list": b"[" * 10000,
    "deep-closed-objects": b'{"a":' * 2000 + b"1" + b"}" * 2000,  # valid JSON, just deep
    "list-for-object": b'[{"format": 1, "files": [], "steps": []}]',
    "nul-and-invalid-utf8": b'{"format": "\x00\xff\xfe", "files": [\x00]}',
}


def _published(tmp_path: Path) -> Host:
    h = make_host(tmp_path / "h")
    h.env["DRIVER_CONFIG_DIGEST"] = "sha256-d"  # so init writes nvidia-driver.state
    done = h.run("init", "--no-wait")
    assert done.returncode == 0, done.stderr
    (tmp_path / "h/outside").write_text(OUTSIDE)
    return h


def _clean(done: subprocess.CompletedProcess[str]) -> str:
    text = done.stdout + done.stderr
    assert "Traceback" not in text and "internal error" not in text, text
    return done.stderr


def _init_twice(h: Host) -> str:
    """Both starts succeed (the first heals, the second finds it healed); the first one's stderr."""
    first = h.run("init", "--no-wait", timeout=60)
    assert first.returncode == 0, first.stderr
    second = h.run("init", "--no-wait", timeout=60)
    assert second.returncode == 0, second.stderr
    _clean(second)
    return _clean(first)


def _plant(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_the_decoder_bounds_depth_size_and_type_and_skips_strings() -> None:
    assert decode_json('["[[[[", {"a": "{{{{\\"[["}]', limit=100) == ["[[[[", {"a": '{{{{"[['}]
    assert decode_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, limit=100)
    big = "[" + '"[[{",' * (1 << 19) + "[[1]]]"  # over 1 MiB of quotes and brackets: the regex path
    assert nesting_depth(big) == 3 and len(decode_json(big, limit=len(big))) == (1 << 19) + 1
    for bad in (
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
        "[" * 100000,
        '{"a":' * 3000 + "1" + "}" * 3000,
        b"\xff[]",
        "NaN",
        "[1,",
        '"unterminated \\" [[[',
    ):
        with pytest.raises(JsonFormatError):
            decode_json(bad, limit=1 << 20)
    with pytest.raises(JsonFormatError, match="larger than 10 bytes"):
        decode_json("[" + " " * 10 + "]", limit=10)
    with pytest.raises(JsonFormatError, match="list where an object belongs"):
        decode_object("[]", limit=10)


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


_TRICKY_TEXT = st.text(alphabet=st.sampled_from('[]{}"\\/ a\u00e9\u20ac\n'), max_size=12)
_VALUES = st.recursive(
    st.none() | st.integers() | _TRICKY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY_TEXT, inner, max_size=4),
    max_leaves=40,
)


@given(value=_VALUES, ascii_only=st.booleans())
@settings(max_examples=400, deadline=None)
def test_the_depth_scan_agrees_with_the_value_json_decodes(value: object, ascii_only: bool) -> None:
    # Strings full of brackets, quotes and backslashes (escaped or, with ensure_ascii=False, raw UTF-8).
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert nesting_depth(text) == nesting_depth(text.encode()) == _depth(value)


@pytest.mark.timeout(60)
def test_the_depth_scan_is_linear_on_hostile_text() -> None:
    # Escaped quotes, lone quotes and brackets at the largest cap any reader uses (16 MiB): each one
    # would make a backtracking string pattern or a per-character loop take minutes.
    for text in (
        '"' + '\\"' * ((8 << 20) - 1),
        '"' * (16 << 20),
        "[" * (16 << 20),
        "[]" * (8 << 20),
        "[" * (8 << 20) + "]" * (8 << 20),
        "\\" * (16 << 20),
    ):
        started = time.monotonic()
        with pytest.raises(JsonFormatError):
            decode_json(text, limit=16 << 20)
        assert time.monotonic() - started < 5.0, text[:10]


def test_a_damaged_manifest_is_ignored_and_rewritten(tmp_path: Path) -> None:
    h = _published(tmp_path)
    manifest = h.driver_root / MANIFEST_PATH
    for name, data in [*DAMAGE.items(), ("over-the-cap", b" " * (MAX_MANIFEST + 1))]:
        _plant(manifest, data)
        stderr = _init_twice(h)
        assert f"ignoring {manifest}" in stderr or f"ignoring the manifest ({manifest}" in stderr, (name, stderr)
        assert read_manifest(h.driver_root)[1] is not None, name


def test_a_damaged_journal_is_dropped(tmp_path: Path) -> None:
    h = _published(tmp_path)
    journal = h.driver_root / JOURNAL
    for name, data in DAMAGE.items():
        _plant(journal, data)
        stderr = _init_twice(h)
        assert f"{journal}: damaged journal dropped" in stderr, (name, stderr)
        assert not os.path.lexists(journal) and read_manifest(h.driver_root)[1] is not None, name


def test_a_damaged_publish_failed_record_is_reported_then_cleared(tmp_path: Path) -> None:
    h = _published(tmp_path)
    record = h.run_dir / PUBLISH_FAILED
    for name, data in [*DAMAGE.items(), ("over-the-cap", b" " * (MAX_FAILURE_RECORD + 1))]:
        _plant(record, data)
        status = h.run("status", "--json")
        shown = json.loads(status.stdout)
        assert shown["driver_root"]["last_publish_failed"] is True, name
        failed = [f["message"] for f in shown["findings"] if f["code"] == "LAST_PUBLISH_FAILED"]
        assert failed and "(of unknown)" in failed[0], (name, failed)
        assert f"{record}: ignored" in _clean(status), name
        _init_twice(h)
        assert not os.path.lexists(record), name  # cleared by the start that found the root healthy


def test_a_damaged_verify_record_is_ignored_and_rewritten_after_ready(tmp_path: Path) -> None:
    h = _published(tmp_path)
    record = h.run_dir / "nvidia-driver.verify.json"
    for name, data in DAMAGE.items():
        _plant(record, data)
        status = h.run("status", "--json")
        assert status.returncode == 0, (name, status.stderr)
        assert f"{record}: ignored" in _clean(status), name
    record.unlink()
    record.mkdir()  # and a directory in its place: the check after Ready replaces it
    (record / "inner").write_text("x")
    proc = h.start("init")
    try:
        wait_until(lambda: record.is_file() and parse_report(record.read_text()) is not None, "the verify record", 60)
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and f"{record}: a directory where our state file belongs" in err


def test_a_damaged_image_index_is_ignored_with_one_warning(tmp_path: Path) -> None:
    # The index is the image's, not state: nothing rewrites it; every copied file is hashed instead.
    for name, data in DAMAGE.items():
        h = make_host(tmp_path / name)
        _plant(h.userspace / DIGEST_INDEX, data)
        stderr = _init_twice(h)
        assert f"ignoring USERSPACE_ROOT/{DIGEST_INDEX} (every copied file is hashed)" in stderr, (name, stderr)
        assert (h.userspace / DIGEST_INDEX).read_bytes() == data


def test_the_module_verdict_replaced_or_damaged(tmp_path: Path) -> None:
    tree = Path(shutil.copytree(FIXTURES / "hosts/talos-1.13-srcversion-mismatch", tmp_path / "t", symlinks=True))
    (tree / "proc" / BOOT_ID).parent.mkdir(parents=True, exist_ok=True)
    (tree / "proc" / BOOT_ID).write_text("3f0c2b1e-0000-4000-8000-000000000001\n")
    (tree / "run").mkdir()
    paths = fixture_paths(tree)
    verdict = tree / "run" / VERDICT_FILE
    outside = tmp_path / "outside"
    outside.write_text(OUTSIDE)
    for plant in (verdict.mkdir, lambda: verdict.symlink_to(outside)):
        plant()
        note = hand_verdict_to_init(paths, Settings(driver_config_digest="d"), "d")
        assert "verdict for init: mismatch" in note, note
        assert verdict.is_file() and not verdict.is_symlink()
        assert parse_verdict(verdict.read_text()).module_files
        verdict.unlink()
    assert outside.read_text() == OUTSIDE
    for data in DAMAGE.values():
        verdict.write_bytes(data)
        assert load_verdict(paths, Binding(None, "d", None, None)) is None  # ignored, with a warning


def _replace(path: Path, kind: str, outside: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    if kind == "directory":
        (path / "inner/deeper").mkdir(parents=True)
        (path / "inner/deeper/file").write_text("x")
        (path / "link-out").symlink_to(outside)
    elif kind == "symlink-out":
        path.symlink_to(outside)
    elif kind == "symlink-to-outside-dir":
        (outside.parent / "outside-dir").mkdir(exist_ok=True)
        path.symlink_to(outside.parent / "outside-dir")
    elif kind == "dangling-symlink":
        path.symlink_to(outside.parent / "nowhere")
    elif kind == "file":
        path.write_text("Ready")
    else:
        os.mkfifo(path)


# Each failed every start on main with a directory (the pid file also with a link, validations with a link
# or a file); the log copy was switched off for good.
RUN_FILES = [
    "nvidia-driver.pid",
    "nvidia-driver.state",
    "validations/.driver-daemons-status",
    PUBLISH_FAILED,
    "validations",
    "nvidia-driver.log",
]


@pytest.mark.parametrize("rel", RUN_FILES)
def test_a_run_dir_file_replaced_by_a_directory_link_or_fifo_is_replaced(tmp_path: Path, rel: str) -> None:
    h = _published(tmp_path)
    outside = tmp_path / "h/outside"
    path = h.run_dir / rel
    kinds = ["directory", "symlink-out", "symlink-to-outside-dir", "dangling-symlink", "fifo"]
    if rel == "validations":  # a directory is what belongs there; a file does not
        kinds = [*kinds[1:], "file"]
    for kind in kinds:
        _replace(path, kind, outside)
        before = snapshot(tmp_path, skip=(h.run_dir,))
        stderr = _init_twice(h)
        assert snapshot(tmp_path, skip=(h.run_dir,)) == before, (kind, "changed something outside RUN_DIR")
        assert outside.read_text() == OUTSIDE
        assert f"{path}: " in stderr and "where our state file belongs" in stderr, (kind, stderr)
        if rel == "nvidia-driver.log":
            assert "Done (--no-wait)" in path.read_text()
        elif rel == "nvidia-driver.state":
            assert path.read_text() == "sha256-d"
        elif rel.startswith("validations"):
            assert (h.run_dir / "validations/.driver-daemons-status").read_text() == "Ready"
        else:
            assert not os.path.lexists(path)  # the pid file goes with init; the record after a good start


def test_an_unreadable_state_file_reads_as_absent(tmp_path: Path) -> None:
    # A generic host compares it with DRIVER_CONFIG_DIGEST before step 10 would replace it.
    paths = HostPaths(run_dir=tmp_path / "run")
    paths.state_file.mkdir(parents=True)
    assert read_state(paths) is None
    paths.state_file.rmdir()
    os.mkfifo(paths.state_file)
    assert read_state(paths) is None
    write_state(paths, "sha256-d")
    assert read_state(paths) == "sha256-d"


def test_a_fifo_in_place_of_every_run_dir_file_at_once_never_blocks(tmp_path: Path) -> None:
    h = _published(tmp_path)
    names = [
        "nvidia-driver.pid",
        "nvidia-driver.state",
        "validations/.driver-daemons-status",
        PUBLISH_FAILED,
        "nvidia-driver.verify.json",
        "nvidia-driver.log",
        VERDICT_FILE,
    ]
    for rel in names:
        _replace(h.run_dir / rel, "fifo", tmp_path / "h/outside")
    started = time.monotonic()
    _init_twice(h)
    subprocess.run(h.argv("status"), env=h.env, cwd=h.base, capture_output=True, timeout=30, check=False)
    assert time.monotonic() - started < 30
    assert (h.run_dir / "validations/.driver-daemons-status").read_text() == "Ready"
    assert not os.path.lexists(h.run_dir / "nvidia-driver.pid")
