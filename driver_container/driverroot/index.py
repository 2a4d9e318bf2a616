"""The image's digest index (``userspace_layout.DIGEST_INDEX``): what the image build recorded of every file
a publish may read, so that ``init`` neither hashes nor parses them.

Written at image build by ``nvidia-driver index-userspace`` (``index_build``): for each file the scan
reads (the published ones and every ELF object the closure looked at), its real path relative to
USERSPACE_ROOT, size, mtime, sha256 and ELF facts (PT_INTERP, DT_NEEDED, DT_SONAME, machine: what
``ElfDeps`` holds). The image's layers are content-addressed and checked by the runtime on pull, so an
entry whose file still has its recorded size and mtime describes that file's content; the published root
is checked against these digests after ``Ready`` and by ``status --verify`` (``integrity``).

Reading is bounded, regular-file checked and never trusted blindly: an index that does not parse is
ignored with a warning (every file is then hashed and parsed as without one), and an entry is used only
for a file whose size and mtime are the recorded ones (``same_mtime``: exact, or the recorded time cut
to whole seconds, which is what a layer tar without sub-second times restores).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from driver_container.base.errors import HostFileNotFound, HostReadError, PublishError
from driver_container.base.resolver import Root
from driver_container.driverroot.manifest import elf_from_json, elf_to_json
from driver_container.formats.boundedjson import decode_json
from driver_container.formats.elffacts import ElfDeps
from driver_container.formats.userspace_layout import DIGEST_INDEX
from driver_container.runtime.fsutil import check_relative

log = logging.getLogger(__name__)

INDEX_FORMAT = 1
MAX_INDEX = 8 << 20  # ~400 bytes an entry; an image indexes ~100 files
MAX_ENTRIES = 20000
_SHA256 = re.compile(r"[0-9a-f]{64}")
NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class IndexEntry:
    path: str  # real path relative to USERSPACE_ROOT (no link in it)
    size: int
    mtime_ns: int
    sha256: str
    is_elf: bool | None = None  # None: not recorded (then the file's own magic decides)
    elf: ElfDeps | None = None  # the facts of an ELF file (None for one that is not, or not parsed)


def same_mtime(recorded: int, actual: int) -> bool:
    """``actual`` is ``recorded``, or ``recorded`` cut to whole seconds: a layer tar without PAX times
    keeps seconds only (Go archive/tar writes sub-second times only in the PAX format; moby's and
    containerd's layer writers do, but a re-packed image may not). Never a later or earlier second."""
    return actual == recorded or (actual % NS == 0 and actual == recorded - recorded % NS)


class UserspaceIndex:
    """The entries of one index, looked up by the real path a scan resolved below ``root``."""

    def __init__(self, root: Path, entries: Iterable[IndexEntry] = (), version: str = "") -> None:
        self._prefix = str(root).rstrip("/") + "/"
        self._entries = {e.path: e for e in entries}
        self.version = version

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, real: Path | str, size: int, mtime_ns: int) -> IndexEntry | None:
        """The entry of the file at ``real`` (a real host path below the root) when its size and mtime are
        the recorded ones; None otherwise (then it is hashed and parsed as without an index)."""
        text = str(real)
        if not text.startswith(self._prefix):
            return None
        entry = self._entries.get(text[len(self._prefix) :])
        if entry is None or entry.size != size or not same_mtime(entry.mtime_ns, mtime_ns):
            return None
        return entry


def format_index(version: str, entries: Iterable[IndexEntry]) -> str:
    """JSON with one entry per line (readable, greppable, diffable between image builds)."""
    lines = []
    for e in sorted(entries, key=lambda e: e.path):
        fields: dict[str, Any] = {"path": e.path, "size": e.size, "mtime_ns": e.mtime_ns, "sha256": e.sha256}
        if e.is_elf is not None:
            fields["elf"] = elf_to_json(e.elf) if e.elf is not None else None
            fields["is_elf"] = e.is_elf
        lines.append("  " + json.dumps(fields, sort_keys=True))
    head = json.dumps({"format": INDEX_FORMAT, "version": version}, sort_keys=True)
    return head[:-1] + ', "files": [\n' + ",\n".join(lines) + "\n]}\n"


def _entry(fields: Any) -> IndexEntry:
    if not isinstance(fields, dict):
        raise TypeError("an entry must be an object")
    path, size, mtime, digest = fields["path"], fields["size"], fields["mtime_ns"], fields["sha256"]
    if not isinstance(path, str) or not path or path != str(check_relative(path)):
        raise ValueError(f"indexed path {str(path)[:200]!r} is not a plain relative path")
    for value in (size, mtime):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{path}: size and mtime_ns must be non-negative integers")
    if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise ValueError(f"{path}: sha256 must be 64 lower-case hex digits")
    is_elf = fields.get("is_elf")
    if is_elf is not None and not isinstance(is_elf, bool):
        raise ValueError(f"{path}: is_elf must be a boolean")
    elf = fields.get("elf")
    facts = elf_from_json(elf) if elf is not None else None
    if (facts is not None) != bool(is_elf):  # an ELF file has its facts; anything else has none
        raise ValueError(f"{path}: ELF facts and is_elf disagree")
    return IndexEntry(path, size, mtime, digest, is_elf, facts)


def parse_index(text: str, root: Path) -> UserspaceIndex:
    """The index in ``text`` (pure); ValueError, TypeError or KeyError when it is not one this code wrote."""
    body = decode_json(text, limit=MAX_INDEX)
    if not isinstance(body, dict) or body.get("format") != INDEX_FORMAT:
        raise ValueError(f"not a format {INDEX_FORMAT} index")
    files, version = body.get("files"), body.get("version")
    if not isinstance(files, list) or not isinstance(version, str) or len(files) > MAX_ENTRIES:
        raise ValueError(f"files must be a list (of at most {MAX_ENTRIES}) and version a string")
    return UserspaceIndex(root, (_entry(f) for f in files), version)


class LazyIndex(UserspaceIndex):
    """``read_index`` on the first lookup: an unchanged restart, whose facts and digests all come from the
    manifest, never reads or parses the index (measured: ~3 ms of a ~20 ms re-publish)."""

    def __init__(self, root: Root) -> None:
        super().__init__(root.path)
        self._root: Root | None = root
        self._lock = threading.Lock()  # the copier's workers and the scan look up concurrently

    def _load(self) -> None:
        if self._root is None:
            return
        with self._lock:
            if self._root is not None:
                loaded = read_index(self._root)
                self._entries, self.version = loaded._entries, loaded.version
                self._root = None

    def __len__(self) -> int:
        self._load()
        return super().__len__()

    def lookup(self, real: Path | str, size: int, mtime_ns: int) -> IndexEntry | None:
        self._load()
        return super().lookup(real, size, mtime_ns)


def read_index(root: Root) -> UserspaceIndex:
    """The index in USERSPACE_ROOT (bounded, a regular file, links resolved inside the root); an empty
    one when there is none (a userspace that is not this image's) or it is damaged (with a warning)."""
    shown = f"USERSPACE_ROOT/{DIGEST_INDEX}"
    try:
        data = root.read_bytes(DIGEST_INDEX, limit=MAX_INDEX)
    except HostFileNotFound:
        log.debug("no %s: every copied file is hashed", shown)
        return UserspaceIndex(root.path)
    except HostReadError as exc:
        log.warning("ignoring %s (every copied file is hashed): %s", shown, exc.message)
        return UserspaceIndex(root.path)
    try:
        return parse_index(data.decode("utf-8"), root.path)
    except (ValueError, TypeError, KeyError, PublishError) as exc:
        reason = exc.message if isinstance(exc, PublishError) else str(exc)[:300]
        log.warning("ignoring %s (every copied file is hashed): not an index this version wrote: %s", shown, reason)
        return UserspaceIndex(root.path)
