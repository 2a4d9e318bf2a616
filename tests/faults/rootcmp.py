"""Compare two published driver roots: the manifest (less the publish-time mtimes) and every entry's
type, mode, sha256 or link target."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hostenv import snapshot

MANIFEST = ".driver-container/manifest.json"


def _strip_mtimes(value: Any) -> Any:
    # The published files' own mtimes differ between two publishes; the sources' identities must not.
    if isinstance(value, dict):
        return {k: _strip_mtimes(v) for k, v in value.items() if k != "mtime_ns"}
    if isinstance(value, list):
        return [_strip_mtimes(v) for v in value]
    return value


def root_state(root: Path) -> tuple[Any, dict[str, Any]]:
    manifest = json.loads((root / MANIFEST).read_text())
    files = snapshot(root)
    files.pop(MANIFEST, None)
    return _strip_mtimes(manifest), files


def leftovers(root: Path) -> list[str]:
    """Temporary names a killed publish could leave (staged files are dot-prefixed or *.tmp)."""
    found = []
    for dirpath, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            if ".tmp" in name or name.startswith(".#"):
                found.append(str(Path(dirpath, name).relative_to(root)))
    return found
