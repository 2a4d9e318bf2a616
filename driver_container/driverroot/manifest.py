"""The manifest at DRIVER_ROOT/.driver-container/manifest.json (pure: records <-> JSON text).

One record per published path (file, link or directory) with size, sha256 and mode, plus what a restart needs to
skip unchanged files without re-reading them: the source's identity (path, size, mtime), the
published file's mtime, and the source's ELF facts (interpreter, SONAME, DT_NEEDED...), so that a restart
on an unchanged userspace parses no ELF header. A file whose state differs from its record is unknown
and gets rewritten; a source whose identity differs is read again.

Identity is (path, size, mtime_ns), as make and rsync use: a package upgrade or `cp` changes the mtime;
the inode is left out because overlayfs (the image's root) may renumber it when the container restarts,
which would turn every restart into a full rewrite.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Literal, get_args

from driver_container.base.errors import PublishError
from driver_container.base.fileread import is_io_error
from driver_container.base.records import NamedRecord
from driver_container.formats.boundedjson import decode_json
from driver_container.formats.elffacts import ElfDeps
from driver_container.runtime.fsutil import check_relative, open_regular, opened_dir

log = logging.getLogger(__name__)

FORMAT = 1
MANIFEST_PATH = PurePosixPath(".driver-container/manifest.json")
MAX_MANIFEST = 16 << 20  # ~600 bytes a record; a publish has ~50


# What a published path is on disk: a regular file (copied or generated), a symlink, or a directory
# published for its own sake (dev/shm; the parents of other paths are not recorded).
RecordType = Literal["file", "link", "dir"]
RECORD_TYPES: tuple[RecordType, ...] = get_args(RecordType)


class Record(NamedRecord):
    path: str
    type: RecordType
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


class Manifest(NamedRecord):
    """What the last commit published. ``inputs`` and ``cache`` let a restart recognise an unchanged root
    without planning (``publish.unchanged``): what the plan was computed from, and the (size, mtime_ns)
    of the ld.so.cache the commit put in place; "" and None where that is not known."""

    version: str
    triplet: str
    records: tuple[Record, ...]
    inputs: str = ""
    cache: tuple[int, int] | None = None

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
    head = {
        "format": FORMAT,
        "version": manifest.version,
        "triplet": manifest.triplet,
        "inputs": manifest.inputs,
        "cache": list(manifest.cache) if manifest.cache else None,
    }
    return json.dumps(head, sort_keys=True)[:-1] + ', "files": [\n' + files + "\n]}\n"


def _fields(record: Record) -> dict[str, Any]:
    """The record as a dict (its ELF facts as their own object)."""
    fields = record._asdict()
    if record.elf is not None:
        fields["elf"] = elf_to_json(record.elf)
    return fields


def parse_manifest(text: str) -> Manifest | None:
    """The manifest, or None when it is not one this code wrote (then every file is treated as unknown)."""
    try:
        body = decode_json(text, limit=MAX_MANIFEST)
        if not isinstance(body, dict) or body.get("format") != FORMAT or not isinstance(body.get("files"), list):
            return None
        version, triplet, inputs = body["version"], body["triplet"], body.get("inputs", "")
        if not all(isinstance(v, str) for v in (version, triplet, inputs)):
            return None
        records = tuple(_record(r) for r in body["files"])
        return Manifest(version, triplet, records, inputs, _cache_identity(body.get("cache")))
    except (ValueError, TypeError, KeyError, AttributeError, PublishError):
        return None


def _cache_identity(value: Any) -> tuple[int, int] | None:
    """[size, mtime_ns] of ld.so.cache as written; None for anything else (the full path then checks it)."""
    if isinstance(value, list) and len(value) == 2 and all(type(v) is int and v >= 0 for v in value):
        return value[0], value[1]
    return None


_RECORD_TYPES = {
    "path": str,
    "type": str,
    "mode": int,
    "size": int,
    "sha256": str,
    "target": str,
    "mtime_ns": int,
    "source": str,
    "source_size": int,
    "source_mtime_ns": int,
}
_ELF_TYPES = {
    "machine": str,
    "elf_class": int,
    "elf_type": str,
    "interpreter": (str, type(None)),
    "soname": (str, type(None)),
}


def _checked(values: Mapping[str, Any], types: Mapping[str, Any]) -> None:
    for name, value in values.items():
        want = types.get(name)
        if want is None or not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise TypeError(f"manifest field {name}: {type(value).__name__}")


def _record(fields_: Mapping[str, Any]) -> Record:
    if not isinstance(fields_, dict):
        raise TypeError("a record must be an object")
    elf = fields_.get("elf")
    plain = {k: v for k, v in fields_.items() if k != "elf"}
    _checked(plain, _RECORD_TYPES)
    if plain.get("type") not in RECORD_TYPES:
        raise TypeError("record type")
    check_relative(plain.get("path", ""))
    if not str(plain.get("path", "")).strip("/"):
        raise TypeError("empty path")
    if elf is None:
        return Record(**plain)
    return Record(**{**plain, "elf": elf_from_json(elf)})


def elf_from_json(elf: Any) -> ElfDeps:
    """ELF facts as ``format_manifest`` (and the image's index, ``publish.index``) write them; TypeError,
    KeyError or ValueError when they are not."""
    if not isinstance(elf, dict):
        raise TypeError("elf must be an object")
    lists = {k: elf.get(k) for k in ("needed", "runpath")}
    if not all(isinstance(v, list) and all(isinstance(n, str) for n in v) for v in lists.values()):
        raise TypeError("needed and runpath must be lists of strings")
    _checked({k: v for k, v in elf.items() if k not in lists}, _ELF_TYPES)
    return ElfDeps(**{**elf, "needed": tuple(elf["needed"]), "runpath": tuple(elf["runpath"])})


def elf_to_json(elf: ElfDeps) -> dict[str, Any]:
    return elf._asdict()


# The last manifest parsed under each root, by the identity of its file (a new manifest is a new inode,
# renamed into place; ctime changes with any write): a restart reads it twice (the inspection's publish
# status, then the unchanged-root check), ~2.5 ms each for the Debian 535 root (bench/startup.py).
_LAST_READ: dict[str, tuple[tuple[int, int, int, int, int], str, Manifest]] = {}


def read_manifest(root: Path) -> tuple[str, Manifest | None]:
    """(text, manifest) of ROOT/.driver-container/manifest.json; ("", None) when absent or damaged;
    PublishError when it could not be read for an I/O or resource error (EMFILE, EIO: not absent).

    Read bounded, without following a link (neither .driver-container nor the file), and only a regular
    file: a damaged manifest only means that every published file is unknown and rewritten.
    """
    shown = root / MANIFEST_PATH
    try:
        with opened_dir(root, MANIFEST_PATH.parent) as state:
            fd, st = open_regular(MANIFEST_PATH.name, shown=str(shown), dir_fd=state)
    except PublishError as exc:
        if is_io_error(exc):  # EMFILE, EIO: the manifest may well be there; "absent" would be a guess
            raise
        if os.path.lexists(shown) or os.path.islink(root / MANIFEST_PATH.parent):
            log.warning("ignoring the manifest (every file is rewritten): %s", exc.message)
        return "", None
    identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    known = _LAST_READ.get(str(root))
    if known is not None and known[0] == identity:
        os.close(fd)
        return known[1], known[2]
    try:
        data = os.read(fd, MAX_MANIFEST + 1) if st.st_size <= MAX_MANIFEST else b""
    except OSError as exc:
        data = b""
        log.warning("ignoring the manifest %s: %s", shown, exc.strerror)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    manifest = parse_manifest(text) if text else None
    if manifest is None:
        log.warning("ignoring %s: not a manifest this version wrote (every published file is rewritten)", shown)
        return "", None
    _LAST_READ[str(root)] = (identity, text, manifest)
    return text, manifest
