"""Run ``ldconfig -r DRIVER_ROOT`` into staging and check that cache with our own reader before it is used.

ld.so and the toolkit find libraries through ROOT/etc/ld.so.cache; the check requires every published
SONAME to resolve (with ld.so's binary search, for this architecture's flags) to the published file, and
every NVIDIA SONAME to a file named *.so.<version>: the legacy nvidia-container-cli keeps a library only
if its resolved name ends with the loaded module version (NVIDIA/libnvidia-container src/nvc_info.c
``select_libraries`` @ 1d44a936).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from driver_container.base.errors import HostReadError, PublishError
from driver_container.base.problems import Problem
from driver_container.base.resolver import Root
from driver_container.driverroot.journal import STAGING
from driver_container.formats.ldcache import (
    FLAGS_BY_MACHINE,
    LD_SO_CACHE_LIMIT,
    lookup,
    parse_ld_cache,
)
from driver_container.formats.ldcache import LD_SO_CACHE as CACHE
from driver_container.publish.model import PlannedEntry, PublishPlan
from driver_container.runtime.fsutil import ensure_dir
from driver_container.runtime.runner import Runner

log = logging.getLogger(__name__)

NEW_CACHE = "ld.so.cache"  # ldconfig's output, in STAGING until it is checked


def cache_problems(plan: PublishPlan, driver_root: Path, cache: str = CACHE) -> tuple[Problem, ...]:
    """Why the cache ``cache`` (in-root path) in ``driver_root`` does not serve the plan (empty when it does)."""
    root = Root(driver_root).snapshot()  # each SONAME's entry and published path resolved through one lstat cache
    try:
        entries = parse_ld_cache(root.read_bytes(cache, limit=LD_SO_CACHE_LIMIT), source=str(driver_root / cache))
    except HostReadError as exc:  # LdCacheFormatError, HostFileNotFound...: the cache must be (re)built
        return (Problem.of(exc),)
    except OSError as exc:
        return (Problem(driver_root / cache, exc.strerror or str(exc)),)
    except Exception as exc:  # anything else the reader meets: rebuild too
        return (Problem(driver_root / cache, str(exc)),)
    flags = FLAGS_BY_MACHINE[plan.triplet.split("-", 1)[0]]
    problems: list[Problem] = []
    for soname, published in sorted(plan.sonames.items()):
        entry = lookup(entries, soname, flags)
        if entry is None:
            problems.append(Problem(soname, "not in the cache"))
            continue
        found = root.resolve(entry.value)
        expected = root.resolve(published)
        if found != expected or not os.path.isfile(found):
            problems.append(Problem(soname, f"resolves to {entry.value} -> {found}, expected {expected}"))
        elif soname in plan.nvidia_sonames and not found.name.endswith(f".so.{plan.version}"):
            problems.append(Problem(soname, f"resolves to {found.name}, not a file named *.so.{plan.version}"))
    return tuple(problems)


def build_cache(plan: PublishPlan, driver_root: Path, runner: Runner) -> str:
    """``ldconfig`` writes a new cache for ``driver_root`` into staging; returns its name there once our
    reader has checked it. ``-X``: no SONAME links are made or changed (the plan has them all, and a link
    ldconfig made would be outside the journal); ``-C`` is taken inside the ``-r`` root (glibc ldconfig
    chroots first: elf/ldconfig.c, main)."""
    staged = f"/{STAGING}/{NEW_CACHE}"
    ensure_dir(driver_root, STAGING)  # ldconfig creates no directory; a cache-only rebuild staged nothing
    runner.run(["ldconfig", "-X", "-r", str(driver_root), "-C", staged])
    problems = cache_problems(plan, driver_root, staged)
    if problems:
        raise PublishError(
            f"the ld.so.cache written by `ldconfig -r {driver_root}` does not resolve the published "
            f"libraries to version {plan.version}: " + "; ".join(map(str, problems[:5])),
            path=driver_root / staged.lstrip("/"),
            fix="the image's libraries must all be the loaded driver version with their SONAME links",
        )
    return NEW_CACHE


def closure_problems(plan: PublishPlan) -> tuple[Problem, ...]:
    """Executables and libraries whose interpreter or DT_NEEDED the plan does not publish (pure); the names
    the scan accepted as missing for optional libraries (``PublishPlan.optional_missing``) are not counted."""
    by_path = {str(e.path): e for e in plan.entries}
    libdir = str(plan.libdir)
    problems: list[Problem] = []
    for entry in plan.entries:
        facts = entry.source.elf if entry.source else None
        if facts is None:
            continue
        if facts.interpreter and not _published(by_path, facts.interpreter.lstrip("/")):
            problems.append(Problem(entry.path, f"interpreter {facts.interpreter} is not published"))
        accepted = {n for real, n in plan.optional_missing if entry.source and real == str(entry.source.real)}
        for needed in facts.needed:
            if needed in accepted:
                continue
            if needed not in plan.sonames and not _published(by_path, f"{libdir}/{needed}"):
                problems.append(Problem(entry.path, f"needs {needed}, which is not published"))
    return tuple(problems)


def _published(by_path: dict[str, PlannedEntry], path: str) -> bool:
    for _ in range(40):
        entry = by_path.get(path)
        if entry is None or entry.kind != "link" or entry.target is None:
            return entry is not None
        path = os.path.normpath(os.path.join(os.path.dirname(path), entry.target))
    return False
