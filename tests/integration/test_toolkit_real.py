"""NVIDIA's real container toolkit v1.20.0 reads every published root (docs/publish.md).

For each real userspace the suite publishes (tests/helpers/published_roots.py: Debian's 535 as a debootstrap
chroot and in both test images, the 535/550/555 graphics trees, arm64 535, the image built from the
``.run``-shaped tree), ``init --no-wait`` publishes it on the Talos fixture host and the toolkit's own
binaries (tests/helpers/toolkit.py: nvidia-ctk's management spec with gpu-operator v26.7's flags, and
nvidia-container-runtime's graphics edits) read the published root and the full userspace root. Every
difference, and every warning nvidia-ctk prints on the published root, must be the one docs/publish.md's
tables give for that userspace ("What NVIDIA's container toolkit finds"): a row that goes stale or a new
difference fails. The device nodes are those init made in the root with mknod from the fixture's
/proc/devices: stand-ins, no GPU behind them.

arm64: the toolkit is an x86_64 build; it only reads files and ld.so.cache by name, so it reads the arm64
root as it would on an arm64 node (its dlopen of the arm64 libnvidia-ml fails, as NVML would without a GPU).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest
from helpers.published_roots import ALL, CHROOT_535, CLI, GRAPHICS, Published, Userspace
from helpers.support import REPO
from helpers.toolkit import Difference, Item, ToolkitView, differences, path_problems, toolkit_view

pytestmark = pytest.mark.artefact

DOC = REPO / "docs" / "publish.md"
PARAMS = [pytest.param(u, id=u.name, marks=[pytest.mark.container] if u.image else []) for u in ALL]


class Compared(NamedTuple):
    published: Published
    source: ToolkitView  # the full userspace root
    root: ToolkitView  # the published root


@pytest.fixture(scope="module")
def compared(
    published_userspaces: Callable[[Userspace], Published], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[Userspace], Compared]:
    done: dict[str, Compared] = {}

    def get(userspace: Userspace) -> Compared:
        if userspace.name not in done:
            p = published_userspaces(userspace)
            work = tmp_path_factory.mktemp(f"toolkit-{userspace.name}")
            # The operator's dev root is the driver root when it has dev/ (gpu-operator cmd/nvidia-validator
            # driver.go getDriverInfo); the full userspace has none, so it gets the same nodes.
            source = toolkit_view(p.source, p.driver_root, userspace.version, work / "source")
            root = toolkit_view(p.driver_root, p.driver_root, userspace.version, work / "root")
            done[userspace.name] = Compared(p, source, root)
        return done[userspace.name]

    return get


def _cells(line: str) -> list[str]:
    return [c.strip().replace("`", "") for c in line.strip().strip("|").split("|")]


def doc_table(heading: str) -> list[list[str]]:
    """The rows of the first table below ``heading`` in docs/publish.md, cells without backticks."""
    lines = DOC.read_text().splitlines()
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("|") and not re.fullmatch(r"\|[-| :]+\|", line.strip()):
            rows.append(_cells(line))
        elif rows and not line.startswith("|"):
            break
    return rows[1:]  # the header row


def _names(cell: str) -> set[str]:
    return {u.name for u in ALL} if cell == "all" else {n.strip() for n in cell.split(",")}


DIFFERENCES = "### Differences between the published root and the full userspace"
WARNINGS = "### Warnings nvidia-ctk prints on a published root"


def documented_differences(userspace: Userspace) -> set[Difference]:
    # | what | name | published root | userspaces | why |
    return {
        Difference(kind, name, side)
        for kind, name, side, who, _why in doc_table(DIFFERENCES)
        if userspace.name in _names(who)
    }


def documented_warnings(userspace: Userspace) -> set[str]:
    # | warning | userspaces | why |
    return {warning for warning, who, _why in doc_table(WARNINGS) if userspace.name in _names(who)}


@pytest.mark.parametrize("userspace", PARAMS)
def test_the_toolkit_finds_in_the_published_root_what_the_docs_say(
    userspace: Userspace, compared: Callable[[Userspace], Compared]
) -> None:
    """Every library, binary, firmware file, config, symlink hook and ldcache folder of the full root's
    spec is in the published root's, or docs/publish.md lists the difference with its reason."""
    c = compared(userspace)
    assert sorted(differences(c.source, c.root)) == sorted(documented_differences(userspace))


@pytest.mark.parametrize("userspace", PARAMS)
def test_nothing_in_the_published_roots_spec_is_missing_or_dangles(
    userspace: Userspace, compared: Callable[[Userspace], Compared]
) -> None:
    c = compared(userspace)
    assert path_problems(c.root) == []
    libraries = {i.name for i in c.root.items if i.kind == "library"}
    assert {"libcuda.so.<v>", "libnvidia-ml.so.<v>"} <= libraries  # the check is not vacuous


@pytest.mark.parametrize("userspace", PARAMS)
def test_every_warning_on_the_published_root_is_explained(
    userspace: Userspace, compared: Callable[[Userspace], Compared]
) -> None:
    assert sorted(compared(userspace).root.warnings) == sorted(documented_warnings(userspace))


def test_the_tables_name_only_userspaces_the_suite_publishes() -> None:
    known = {u.name for u in ALL}
    for row in [*doc_table(DIFFERENCES), *doc_table(WARNINGS)]:
        assert _names(row[-2]) <= known, row
    assert {row[2] for row in doc_table(DIFFERENCES)} <= {"lacks", "adds", "differs"}


@contextmanager
def moved_away(path: Path) -> Iterator[None]:
    """``path`` renamed aside for the block, then put back (the root stays the one the module shares)."""
    aside = path.with_name(path.name + ".issue-29-aside")
    os.rename(path, aside)
    try:
        yield
    finally:
        os.rename(aside, path)


def test_a_library_removed_from_the_published_root_fails_the_comparison(
    compared: Callable[[Userspace], Compared], tmp_path: Path
) -> None:
    """What the comparison protects: one published library gone, and the toolkit's spec lacks it."""
    userspace = GRAPHICS[0]
    c = compared(userspace)
    lib = c.published.driver_root / "usr/lib" / userspace.triplet / f"libnvidia-ptxjitcompiler.so.{userspace.version}"
    with moved_away(lib):
        broken = toolkit_view(c.published.driver_root, c.published.driver_root, userspace.version, tmp_path)
    found = differences(c.source, broken)
    assert Difference("library", "libnvidia-ptxjitcompiler.so.<v>", "lacks") in found
    assert found != documented_differences(userspace)


def test_persistenced_socket_is_where_the_toolkit_mounts_it(
    compared: Callable[[Userspace], Compared], tmp_path: Path
) -> None:
    """The warning "Could not locate /nvidia-persistenced/socket" is --no-wait's: a waiting init runs
    nvidia-persistenced with its socket at DRIVER_ROOT/run/nvidia-persistenced/socket (node/persistenced.py).
    A socket bound there stands in for the daemon's; the toolkit then mounts it."""
    userspace = GRAPHICS[0]
    c = compared(userspace)
    run = c.published.driver_root / "run/nvidia-persistenced"
    made = [d for d in (run.parent, run) if not d.exists()]
    run.mkdir(parents=True, exist_ok=True)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.bind(str(run / "socket"))
            view = toolkit_view(c.published.driver_root, c.published.driver_root, userspace.version, tmp_path)
    finally:
        (run / "socket").unlink(missing_ok=True)
        for d in reversed(made):
            d.rmdir()
    assert Item("ipc", "/run/nvidia-persistenced/socket") in view.items
    assert not any("nvidia-persistenced/socket" in w for w in view.warnings)


@pytest.mark.parametrize("userspace", PARAMS)
def test_status_names_what_the_toolkit_cannot_find(
    userspace: Userspace, compared: Callable[[Userspace], Compared]
) -> None:
    """What the toolkit looks for and these images lack (its "Could not locate" warnings
    above), ``status`` lists with what a workload loses. libnvidia-nvvm70 is not among them: it came with
    R575, after these drivers (driverroot/toolkit_features.py)."""
    c = compared(userspace)
    done = subprocess.run(
        [str(CLI), "status", "--json"],
        env=c.published.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )
    absent = {f["name"]: f["loses"] for f in json.loads(done.stdout)["driver_root"]["not_in_image"]}
    # sh: not the toolkit's but NVIDIA's DRA driver's (docs/mps.md), listed where the userspace has no
    # busybox-static (the debootstrap chroot; publish/static_tools.py).
    shell = set() if (c.published.driver_root / "bin/sh").is_file() else {"sh"}
    assert set(absent) == {"nvidia-imex", "nvidia-imex-ctl", "nvidia-debugdump", *shell}, done.stdout
    assert shell == set() or userspace == CHROOT_535, done.stdout  # every other userspace has one
    for name in set(absent) - shell:
        assert f"Could not locate {name}: {name}: not found" in c.root.warnings
    text = subprocess.run(
        [str(CLI), "status"], env=c.published.env, capture_output=True, text=True, timeout=120, check=False, cwd=REPO
    )
    assert f"  not in the image: nvidia-imex: {absent['nvidia-imex']}" in text.stdout.splitlines()
