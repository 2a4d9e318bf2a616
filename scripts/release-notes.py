#!/usr/bin/env python3
"""The GitHub release notes of a version tag: that version's section of CHANGELOG.md (release.yml).

    python3 scripts/release-notes.py v0.1.0 >notes.md

Exit 1, with the reason on stderr, when the tag is not ``v`` + pyproject.toml's ``version`` (the one
version source) or CHANGELOG.md has no ``## [<version>]`` section with text. Standard library only: the
workflow runs it with the runner's python3 before any set-up.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\]", re.MULTILINE)


def section(changelog: str, version: str) -> str | None:
    """The text under ``## [version]`` up to the next ``## [`` heading, stripped; None when absent or empty."""
    headings = list(HEADING.finditer(changelog))
    for index, heading in enumerate(headings):
        if heading.group("version") == version:
            end = headings[index + 1].start() if index + 1 < len(headings) else len(changelog)
            body = changelog[heading.end() : end].split("\n", 1)[-1].strip()
            return body or None
    return None


def notes(tag: str, root: Path = ROOT) -> str:
    version = str(tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"])
    if tag != f"v{version}":
        raise ValueError(f"tag {tag} is not pyproject.toml's version v{version}")
    body = section((root / "CHANGELOG.md").read_text(), version)
    if body is None:
        raise ValueError(f"CHANGELOG.md has no section '## [{version}]' with text")
    return body + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: release-notes.py TAG", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(notes(argv[0]))
    except (ValueError, OSError) as exc:
        print(f"release-notes: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
