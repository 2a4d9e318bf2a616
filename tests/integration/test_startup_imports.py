"""What an unchanged restart imports (bench/startup.py): each module on that path costs start-up time on every GPU
node, every restart. ``PYTHONPROFILEIMPORTTIME`` lists every import of the process and of its forked
publishing child, if there were one (the flag is inherited); an unchanged restart forks none.

On CPython 3.11 creating a frozen dataclass costs ~1 ms (docs/development.md): the records on this path
are NamedRecords (base/records.py), so ``dataclasses`` itself must not be imported. Neither may the publisher,
pyelftools, the module loader, hashing or the thread pool: an unchanged root is recognised from its manifest, in
``init`` itself, so neither ``ctypes`` (PR_SET_PDEATHSIG of a child) nor ``pickle`` is needed either.
"""

from __future__ import annotations

from pathlib import Path

from helpers.hostenv import Host, make_host

VERSION = "595.91.07"
# Imported only when something is to be written, or never on Talos (modprobe/), or outside a cluster
# (the Kubernetes client), or when the project's version is asked for, or on NVSwitch nodes (Fabric
# Manager), or in a forked child (ctypes, pickle).
NOT_ON_AN_UNCHANGED_RESTART = (
    "typer",  # `init` as the DaemonSet runs it goes around typer (cli/init_entry.py)
    "driver_container.cli.app",
    "dataclasses",
    "hashlib",
    "ctypes",
    "pickle",
    "concurrent.futures",
    "elftools",
    "requests",
    "yaml",
    "importlib.metadata",  # the project's version: read when a verdict or --version needs it, not at import
    "email",
    "driver_container.publish.publisher",
    "driver_container.publish.copier",
    "driver_container.modprobe",
    "driver_container.readers.fabric",
    "driver_container.node.fabricmanager",
    "driver_container.node.persistenced",
)


def _imported(stderr: str) -> set[str]:
    """Module names from ``-X importtime`` lines: ``import time: self | cumulative | <indent>name``."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


def _restart(h: Host) -> set[str]:
    first = h.run("init", "--no-wait")
    assert first.returncode == 0, first.stderr
    again = h.run("init", "--no-wait", PYTHONPROFILEIMPORTTIME="1")
    assert again.returncode == 0, again.stderr
    assert "unchanged since its last publish" in again.stderr, again.stderr[-2000:]
    assert "publishing process" not in again.stderr, "an unchanged restart forked a publishing child"
    return _imported(again.stderr)


def test_an_unchanged_restart_imports_neither_dataclasses_nor_the_publisher(tmp_path: Path) -> None:
    h = make_host(tmp_path / "h")
    done = h.run("index-userspace", "--version", VERSION)  # as the image build does
    assert done.returncode == 0, done.stderr
    imported = _restart(h)
    assert "driver_container.inspect.hoststate" in imported  # the listing is complete: both sides verified
    assert "driver_container.publish.unchanged" in imported
    heavy = sorted(m for m in imported if any(m == n or m.startswith(n + ".") for n in NOT_ON_AN_UNCHANGED_RESTART))
    assert heavy == [], f"an unchanged restart imports {heavy}"
