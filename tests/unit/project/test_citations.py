"""Citations a clone can open: no committed text file cites a note kept outside the repository or an issue
number of the project's own tracker.

A reader of a fresh clone can open an upstream source (repository, path and commit, as the docs' Sources
lists give them) or a page under docs/; they cannot open the reference notes the project was built from
(the operator contract, the format notes and the test-environment notes, kept beside the repository and
not in it), and an issue number says nothing about the reason it stands for. So each such citation names
the upstream source or the docs page instead, or states the reason itself. A docs page of the same name as
a note (formats.md, were docs/ to have one) would need this list changed.

An upstream issue stays citable as ``owner/repo#N`` or ``owner/repo issue N``: a clone can open those.
The ``../shared/tools`` paths that tests and scripts use at run time are inputs, not citations, and pass.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from helpers.support import REPO, require

_NOTE = re.compile(r"(?<![\w.-])(?:gpu-operator-contract|formats|test-environment)\.md(?![\w-])")
_NOTES_DIR = re.compile(r"shared/reference|/work/shared")
_ISSUE = re.compile(r"\bissues? ?#?[0-9]+", re.IGNORECASE)
# "NVIDIA/gpu-operator issue 12": an upstream tracker, which a clone can open ("docs/x.md issue 12" is not).
_UPSTREAM_BEFORE = re.compile(r"(?:^|[\s(])([\w.-]+)/[\w.-]+ $")
_OWN_DIRS = {path.name for path in REPO.iterdir()}
# This file names every forbidden form in its own patterns and planted examples.
SELF = "tests/unit/project/test_citations.py"
MAX_TEXT_BYTES = 4 << 20  # the largest committed text file is under 0.1 MiB; a bigger one is data, not prose


def violations(text: str) -> list[str]:
    """Each citation in ``text`` that a clone cannot open, as ``line N: <what>``."""
    found: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        found += [f"line {number}: {m.group(0)}" for m in _NOTE.finditer(line)]
        found += [f"line {number}: {m.group(0)}" for m in _NOTES_DIR.finditer(line)]
        found += [
            f"line {number}: {m.group(0)}"
            for m in _ISSUE.finditer(line)
            if not ((up := _UPSTREAM_BEFORE.search(line[: m.start()])) and up.group(1) not in _OWN_DIRS)
        ]
    return found


def _committed_text_files() -> dict[str, str]:
    require(shutil.which("git") and (REPO / ".git").exists(), "git and the repository's .git", how="clone it")
    done = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True, timeout=60)
    listed = done.stdout.decode()
    texts: dict[str, str] = {}
    for name in filter(None, listed.split("\0")):
        if name == SELF:
            continue
        path = REPO / name
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_TEXT_BYTES:
            continue
        data = path.read_bytes()
        if b"\0" not in data:
            texts[name] = data.decode("utf-8", errors="replace")
    return texts


def test_no_committed_text_file_cites_what_a_clone_cannot_open() -> None:
    texts = _committed_text_files()
    assert "docs/publish.md" in texts and "driver_container/base/paths.py" in texts  # the listing saw the tree
    found = {name: hits for name, text in texts.items() if (hits := violations(text))}
    assert found == {}


@pytest.mark.parametrize(
    "planted",
    [
        "# the toolkit's search dirs (gpu-operator-contract.md section 6)",
        "(formats.md). pyelftools is imported inside the function",
        "exit 127 (test-environment.md).",
        "see ../shared/reference/talos.md",
        '"""Issue 14 item 8: the flag used to disable verification."""',
        "# Real-GPU check (issue 9): run on a machine with an NVIDIA GPU",
        "selection by role (issues 16, 29)",
        "fixed in issue #12",
        "KIND = 'nvidia.com/gpu-issue29-1'",
        "see docs/publish.md issue 3",
    ],
)
def test_a_planted_citation_is_found(planted: str) -> None:
    assert len(violations(f"first line\n{planted}\n")) >= 1
    assert violations(f"first line\n{planted}\n")[0].startswith("line 2: ")


@pytest.mark.parametrize(
    "allowed",
    [
        "docs/talos.md, section 1",
        "[publish.md](publish.md#whats-in-the-root)",
        "NVIDIA/mig-parted#356 (the hang)",
        "NVIDIA/gpu-operator issue 2702, shown merged",
        "https://github.com/siderolabs/talos/issues/9876",
        "default ``<repo>/../shared/tools/gpu-operator-v26.7.0``",
        "driver_container/formats/kmod/reader.py",
        "the tissue 3 samples",
    ],
)
def test_an_openable_citation_passes(allowed: str) -> None:
    assert violations(allowed) == []
