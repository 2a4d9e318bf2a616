"""The manifest at DRIVER_ROOT/.driver-container/manifest.json (pure: records <-> JSON text).

One record per published path (file or link) with size, sha256 and mode, plus what a restart needs to
skip unchanged files without re-reading them: the source's identity (path, size, mtime), the
published file's mtime, and the source's ELF facts (interpreter, SONAME, DT_NEEDED...), so that a restart
on an unchanged userspace parses no ELF header. A file whose state differs from its record is unknown
and gets rewritten; a source whose identity differs is read again.

Identity is (path, size, mtime_ns), as make and rsync use: a package upgrade or `cp` changes the mtime;
the inode is left out because overlayfs (the image's root) may renumber it when the container restarts,
which would turn every restart into a full rewrite.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from driver_container.elfdeps import ElfDeps

FORMAT = 1
MANIFEST_PATH = PurePosixPath(".driver-container/manifest.json")


@dataclass(frozen=True)
class Record:
    path: str
    type: str  # "file" or "link"
    mode: int
    size: int = 0
    sha256: str = ""
    target: str = ""
    mtime_ns: int = 0
    source: str = ""
    source_size: int = 0
    source_mtime_ns: int = 0
    elf: ElfDeps | None = None


SourceKey = tuple[str, int, int]  # (real source path, size, mtime_ns)


@dataclass(frozen=True)
class Manifest:
    version: str
    triplet: str
    records: tuple[Record, ...]

    def by_path(self) -> dict[str, Record]:
        return {r.path: r for r in self.records}

    def source_identities(self) -> set[SourceKey]:
        """(source path, size, mtime_ns) of every published copy: unchanged sources need no new hash."""
        return {(r.source, r.source_size, r.source_mtime_ns) for r in self.records if r.source}

    def elf_facts(self) -> dict[SourceKey, ElfDeps]:
        """ELF facts of the published sources, by source identity (reused when the source is unchanged)."""
        return {(r.source, r.source_size, r.source_mtime_ns): r.elf for r in self.records if r.source and r.elf}


def format_manifest(manifest: Manifest) -> str:
    """JSON with one file record per line: readable, greppable, and built by json's C encoder (``indent``
    would switch to its pure-Python encoder, ~5x slower on the ~50 records of a publish)."""
    files = ",\n".join(
        "  " + json.dumps(_fields(r), sort_keys=True) for r in sorted(manifest.records, key=lambda r: r.path)
    )
    head = {"format": FORMAT, "version": manifest.version, "triplet": manifest.triplet}
    return json.dumps(head, sort_keys=True)[:-1] + ', "files": [\n' + files + "\n]}\n"


def _fields(record: Record) -> dict[str, Any]:
    """The record as a dict, without ``dataclasses.asdict``'s deep copies."""
    fields = dict(record.__dict__)
    if record.elf is not None:
        fields["elf"] = dict(record.elf.__dict__)
    return fields


def parse_manifest(text: str) -> Manifest | None:
    """The manifest, or None when it is not one this code wrote (then every file is treated as unknown)."""
    try:
        body = json.loads(text)
        if body.get("format") != FORMAT:
            return None
        records = tuple(_record(r) for r in body["files"])
        return Manifest(str(body["version"]), str(body["triplet"]), records)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _record(fields: Mapping[str, Any]) -> Record:
    elf = fields.get("elf")
    if elf is None:
        return Record(**fields)
    facts = ElfDeps(**{**elf, "needed": tuple(elf["needed"]), "runpath": tuple(elf["runpath"])})
    if not all(isinstance(n, str) for n in (*facts.needed, *facts.runpath)):
        raise TypeError("needed and runpath must be strings")
    return Record(**{**fields, "elf": facts})
