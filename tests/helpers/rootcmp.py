"""Compare two published driver roots: the manifest (less the publish-time mtimes) and every entry's
type, mode, sha256 or link target."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from helpers.trees import pseudo_mounts_below, snapshot

MANIFEST = ".driver-container/manifest.json"


def _strip_mtimes(value: Any) -> Any:
    # The published files' own mtimes differ between two publishes, and so does ld.so.cache's (the
    # manifest's "cache" is [size, mtime_ns]); the sources' identities must not.
    if isinstance(value, dict):
        return {
            k: v[:1] if k == "cache" and isinstance(v, list) else _strip_mtimes(v)
            for k, v in value.items()
            if k != "mtime_ns"
        }
    if isinstance(value, list):
        return [_strip_mtimes(v) for v in value]
    return value


def root_state(root: Path) -> tuple[Any, dict[str, Any]]:
    manifest = json.loads((root / MANIFEST).read_text())
    files = snapshot(root)
    files.pop(MANIFEST, None)
    return _strip_mtimes(manifest), files


# What a publish may leave only while it runs: temporaries (fsutil: ``.<name>.<random>.tmp``; publish:
# ``.<name>.<random>.dc-tmp``; ldconfig: ``<cache>~``) and the commit's own state.
TRANSIENT = (".driver-container/staging", ".driver-container/rollback", ".driver-container/journal.json")


def is_leftover(relative: str) -> bool:
    name = relative.rsplit("/", 1)[-1]
    return relative in TRANSIENT or name.endswith((".tmp", ".dc-tmp", "~")) or name.startswith(".#")


def leftovers(root: Path) -> list[str]:
    """Every leftover of a killed or failed publish below ``root`` (see ``is_leftover``); a procfs or sysfs
    mounted in it is not walked (helpers/trees.py)."""
    found = []
    pseudo = pseudo_mounts_below(root)
    for dirpath, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            relative = str(Path(dirpath, name).relative_to(root))
            if is_leftover(relative):
                found.append(relative)
        dirs[:] = [d for d in dirs if Path(dirpath, d) not in pseudo]
    return found
