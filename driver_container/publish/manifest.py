"""The manifest at DRIVER_ROOT/.driver-container/manifest.json (pure: records <-> JSON text).

One record per published path (file or link) with size, sha256 and mode, plus what a restart needs to
skip unchanged files without re-reading them: the source's identity (path, size, mtime) and the
published file's mtime. A file whose state differs from its record is unknown and gets rewritten.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath

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


@dataclass(frozen=True)
class Manifest:
    version: str
    triplet: str
    records: tuple[Record, ...]

    def by_path(self) -> dict[str, Record]:
        return {r.path: r for r in self.records}


def format_manifest(manifest: Manifest) -> str:
    body = {
        "format": FORMAT,
        "version": manifest.version,
        "triplet": manifest.triplet,
        "files": [asdict(r) for r in sorted(manifest.records, key=lambda r: r.path)],
    }
    return json.dumps(body, indent=1, sort_keys=True) + "\n"


def parse_manifest(text: str) -> Manifest | None:
    """The manifest, or None when it is not one this code wrote (then every file is treated as unknown)."""
    try:
        body = json.loads(text)
        if body.get("format") != FORMAT:
            return None
        records = tuple(Record(**r) for r in body["files"])
        return Manifest(str(body["version"]), str(body["triplet"]), records)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
