"""The manifest text round trip (pure), including the ELF facts a restart reuses."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import get_args, get_type_hints

import pytest

from driver_container.driverroot.manifest import (
    MANIFEST_PATH,
    Manifest,
    Record,
    RecordType,
    format_manifest,
    parse_manifest,
    read_manifest,
)
from driver_container.formats.elfdeps import ElfDeps
from driver_container.publish.model import EntryKind, PlannedEntry

CUDA_ELF = ElfDeps("EM_X86_64", 64, "ET_DYN", None, "libcuda.so.1", ("libnvidia-glcore.so.535.309.01",))
SMI_ELF = ElfDeps("EM_X86_64", 64, "ET_EXEC", "/lib64/ld-linux-x86-64.so.2", None, ("libnvidia-ml.so.1",), ("/opt",))
RECORDS = (
    Record(
        "usr/lib/x86_64-linux-gnu/libcuda.so.535.309.01",
        "file",
        0o644,
        29_000_000,
        "ab" * 32,
        mtime_ns=1_700_000_000_000_000_000,
        source="/u/usr/lib/libcuda.so.535.309.01",
        source_size=29_000_000,
        source_mtime_ns=1_690_000_000_123_456_789,
        elf=CUDA_ELF,
    ),
    Record(
        "usr/bin/nvidia-smi",
        "file",
        0o755,
        800_000,
        "cd" * 32,
        mtime_ns=5,
        source="/u/usr/bin/nvidia-smi",
        source_size=800_000,
        source_mtime_ns=6,
        elf=SMI_ELF,
    ),
    Record("usr/lib/x86_64-linux-gnu/libcuda.so.1", "link", 0o777, target="libcuda.so.535.309.01"),
    Record("etc/ld.so.conf", "file", 0o644, 12, "ef" * 32, mtime_ns=7),
)
MANIFEST = Manifest("535.309.01", "x86_64-linux-gnu", RECORDS)


def test_round_trip_is_exact() -> None:
    text = format_manifest(MANIFEST)
    back = parse_manifest(text)
    assert back is not None
    assert back.version == MANIFEST.version and back.triplet == MANIFEST.triplet
    assert sorted(back.records, key=lambda r: r.path) == sorted(RECORDS, key=lambda r: r.path)
    assert format_manifest(back) == text  # stable text, so an unchanged restart does not rewrite it


def test_text_is_sorted_by_path() -> None:
    paths = [f["path"] for f in json.loads(format_manifest(MANIFEST))["files"]]
    assert paths == sorted(paths)


def test_elf_facts_by_source_identity() -> None:
    facts = MANIFEST.elf_facts()
    assert facts == {
        ("/u/usr/lib/libcuda.so.535.309.01", 29_000_000, 1_690_000_000_123_456_789): CUDA_ELF,
        ("/u/usr/bin/nvidia-smi", 800_000, 6): SMI_ELF,
    }


def test_record_written_before_elf_facts_existed() -> None:
    body = json.loads(format_manifest(MANIFEST))
    for f in body["files"]:
        del f["elf"]
    back = parse_manifest(json.dumps(body))
    assert back is not None and back.elf_facts() == {}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        json.dumps({"format": 99, "version": "1", "triplet": "t", "files": []}),
        json.dumps({"format": 1, "version": "1", "triplet": "t", "files": [{"path": "a", "bogus": 1}]}),
        json.dumps(
            {
                "format": 1,
                "version": "1",
                "triplet": "t",
                "files": [{"path": "a", "type": "file", "mode": 1, "elf": {"machine": "x"}}],
            }
        ),
        json.dumps(
            {
                "format": 1,
                "version": "1",
                "triplet": "t",
                "files": [
                    {
                        "path": "a",
                        "type": "file",
                        "mode": 1,
                        "elf": {**CUDA_ELF._asdict(), "needed": [1], "runpath": []},
                    }
                ],
            }
        ),
    ],
)
def test_foreign_or_damaged_text_is_no_manifest(text: str) -> None:
    assert parse_manifest(text) is None


def _write_manifest(root: Path, manifest: Manifest) -> Path:
    path = root / MANIFEST_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(format_manifest(manifest))
    return path


def test_a_second_read_of_the_same_file_is_not_parsed_again(tmp_path: Path) -> None:
    """A restart reads the manifest twice (publish status, then the unchanged-root check): one parse."""
    _write_manifest(tmp_path, MANIFEST)
    first = read_manifest(tmp_path)
    assert first[1] is not None and read_manifest(tmp_path)[1] is first[1]


def test_a_manifest_rewritten_in_place_is_read_again(tmp_path: Path) -> None:
    """Same size and mtime, new content (ctime moves): the remembered parse must not be returned."""
    path = _write_manifest(tmp_path, MANIFEST)
    assert _version(tmp_path) == "535.309.01"
    st = path.stat()
    with path.open("r+") as f:  # the same inode, the same length
        f.write(path.read_text().replace("535.309.01", "535.309.02"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size
    assert _version(tmp_path) == "535.309.02"


def test_a_replaced_manifest_is_read_again(tmp_path: Path) -> None:
    path = _write_manifest(tmp_path, MANIFEST)
    assert _version(tmp_path) == "535.309.01"
    newer = MANIFEST._replace(version="550.163.01")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(format_manifest(newer))
    os.replace(tmp, path)
    assert _version(tmp_path) == "550.163.01"


def _version(root: Path) -> str | None:
    manifest = read_manifest(root)[1]
    return manifest.version if manifest else None


def _one_record(kind: str) -> str:
    record = {"path": "usr/bin/x", "type": kind, "mode": 0o755, "target": "y" if kind == "link" else ""}
    return json.dumps({"format": 1, "version": "1", "triplet": "t", "files": [record]})


def test_record_kinds_are_one_literal_type_the_reader_checks() -> None:
    """The kinds are ``RecordType`` (the plan adds "text", published as a file): each one the type
    names is read back, nothing else is."""
    assert get_type_hints(Record)["type"] == RecordType and get_type_hints(PlannedEntry)["kind"] == EntryKind
    assert set(get_args(EntryKind)) == {*get_args(RecordType), "text"}
    for kind in get_args(RecordType):
        back = parse_manifest(_one_record(kind))
        assert back is not None and back.records[0].type == kind


@pytest.mark.parametrize("kind", ["directory", "symlink", "text", "File", "", "file "])
def test_a_record_of_an_unknown_kind_is_no_manifest(kind: str) -> None:
    assert parse_manifest(_one_record(kind)) is None
