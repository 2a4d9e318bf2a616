"""Every docs/deploy file the documentation, the deploy files' comments and the code name exists, and
every deploy file is named somewhere a user reads.

A reference is a path through deploy/ (`docs/deploy/x.yaml`, the Markdown link `deploy/x.yaml`), a
`talosctl patch mc --patch @x.yaml` argument or a `-f x.yaml` of kubectl/helm: the commands the docs tell
users to run from docs/deploy.
"""

from __future__ import annotations

import re
from pathlib import Path

from helpers.support import REPO

DEPLOY = REPO / "docs" / "deploy"
NAME = r"([A-Za-z0-9][A-Za-z0-9._-]*\.ya?ml)"
PATTERNS = [
    re.compile(rf"(?<![\w/.-])(?:docs/)?deploy/{NAME}"),
    re.compile(rf"--patch\s+@{NAME}"),
    re.compile(rf"(?:kubectl|helm)\b[^\n`]*?\s-f\s+{NAME}"),
]


def _sources() -> list[Path]:
    return sorted(
        [
            REPO / "README.md",
            *(REPO / "docs").glob("*.md"),
            *DEPLOY.glob("*.yaml"),
            *(REPO / "driver_container").rglob("*.py"),
        ]
    )


def references(text: str) -> set[str]:
    text = text.replace("\\\n", " ")  # shell line continuations
    return {m.group(1) for pattern in PATTERNS for m in pattern.finditer(text)}


def _all_references() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in _sources():
        for name in references(path.read_text()):
            found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return found


def test_the_reference_patterns_find_each_form() -> None:
    text = (
        "see docs/deploy/a.yaml and [b](deploy/b.yaml)\n"
        "talosctl patch mc --nodes n --patch @c.yaml\n"
        "helm install x y --version 1 \\\n  -n ns -f d.yaml\n"
        "kubectl apply -f e.yml\n"
        "templates/nvidiadriver.yaml and values.yaml are the chart's, not ours\n"
    )
    assert references(text) == {"a.yaml", "b.yaml", "c.yaml", "d.yaml", "e.yml"}


def test_every_referenced_deploy_file_exists() -> None:
    found = _all_references()
    assert {"talos-machine-config.yaml", "gpu-operator-values.yaml", "nvidiadriver.yaml"} <= set(found)
    missing = {name: sorted(where) for name, where in found.items() if not (DEPLOY / name).is_file()}
    assert missing == {}, f"named but not in docs/deploy: {missing}"


def test_every_deploy_file_is_referenced_from_the_docs() -> None:
    documented = {name for name, where in _all_references().items() if any(w.endswith(".md") for w in where)}
    assert sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name not in documented) == []
