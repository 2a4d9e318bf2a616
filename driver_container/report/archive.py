"""The archive: a gzip-compressed tar of the members under one top directory, with ``index.json`` and
``README.txt`` saying for every member where it came from, its size, and why one is left out or cut.

Built in memory (the members are bounded: ``model.Budget``), then written once: to stdout (``-o -``, for
``kubectl exec ... > report.tar.gz``) or atomically to a file through ``runtime.fsutil`` (temporary file
in the target's directory, renamed over it: a symlink at the target is replaced, never followed).
Entries are plain files, mode 0644, owned by 0:0, with the report's time: nothing of the host's
ownership or layout leaks, and nothing in the tar can point outside its directory.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from driver_container import __version__
from driver_container.formats.redact import redact
from driver_container.report.model import Budget, Member
from driver_container.runtime.fsutil import atomic_write

TOP = "nvidia-driver-bug-report"


def index_json(members: Sequence[Member], budget: Budget, started: float) -> dict[str, Any]:
    return {
        "entrypoint_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(budget.deadline.elapsed(), 3),
        "deadline_s": budget.deadline_s,
        "size_cap": budget.total_cap,
        "members": [
            {
                "name": m.name,
                "source": m.source,
                "included": m.data is not None,
                "size": None if m.data is None else len(m.data),
                "note": m.note,
                "redacted": m.redactions,
            }
            for m in members
        ],
    }


def readme_text(index: dict[str, Any]) -> str:
    lines = [
        f"nvidia-driver bug-report, entrypoint {index['entrypoint_version']}, {index['created']}",
        f"collected in {index['seconds']} s (deadline {index['deadline_s']:g} s, {index['size_cap']} bytes at most)",
        "never included: service-account tokens, kubeconfigs, /proc/cmdline, environment values outside",
        "the allow-list (environment.json), kernel command-line arguments other than nvidia*, NVreg*,",
        "nouveau*, firmware_class.*, module_blacklist and modprobe.blacklist; secret-looking values are",
        "replaced by <redacted>",
        "",
    ]
    for m in index["members"]:
        size = f"{m['size']:>9} B" if m["included"] else "   (none)  "
        note = f"  [{m['note']}]" if m["note"] else ""
        redacted = f" ({m['redacted']} redacted)" if m["redacted"] else ""
        lines.append(f"{size}  {m['name']}  <- {m['source']}{redacted}{note}")
    return "\n".join(lines) + "\n"


def build_archive(members: Sequence[Member], budget: Budget, started: float) -> bytes:
    index = index_json(members, budget, started)
    # The index quotes sources and notes (an error's text among them): redacted like every member.
    listing = [("index.json", json.dumps(index, indent=2) + "\n"), ("README.txt", readme_text(index))]
    files = [(name, redact(text.encode())[0]) for name, text in listing]
    files += [(m.name, m.data) for m in members if m.data is not None]
    buffer = io.BytesIO()
    # mtime 0 in the gzip header: the archive's bytes depend on its content only.
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT, compresslevel=6) as tar:
        for name, data in files:
            entry = tarfile.TarInfo(f"{TOP}/{name}")
            entry.size, entry.mode, entry.mtime = len(data), 0o644, int(started)
            tar.addfile(entry, io.BytesIO(data))
    return buffer.getvalue()


def write_archive(data: bytes, output: Path | None, stdout: BinaryIO) -> None:
    """``output`` None: to ``stdout`` (binary, flushed); else atomically to the file."""
    if output is None:
        stdout.write(data)
        stdout.flush()
        return
    atomic_write(output, data, mode=0o600)
