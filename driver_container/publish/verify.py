"""Run ``ldconfig -r DRIVER_ROOT`` into staging and check that cache with our own reader before it is used.

ld.so and the toolkit find libraries through ROOT/etc/ld.so.cache; the check requires every published
SONAME to resolve (with ld.so's binary search, for this architecture's flags) to the published file, and
every NVIDIA SONAME to a file named *.so.<version>: the legacy nvidia-container-cli keeps a library only
if its resolved name ends with the loaded module version (gpu-operator-contract.md section 6).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from driver_container.errors import LdCacheFormatError, PublishError
from driver_container.formats.ldcache import (
    FLAGS_BY_MACHINE,
    LD_SO_CACHE_LIMIT,
    lookup,
    parse_ld_cache,
)
from driver_container.formats.ldcache import LD_SO_CACHE as CACHE
from driver_container.paths import Root
from driver_container.publish.journal import STAGING
from driver_container.publish.model import PlannedEntry, PublishPlan
from driver_container.runtime.fsutil import ensure_dir
from driver_container.runtime.runner import Runner

log = logging.getLogger(__name__)

NEW_CACHE = "ld.so.cache"  # ldconfig's output, in STAGING until it is checked


def cache_problems(plan: PublishPlan, driver_root: Path, cache: str = CACHE) -> list[str]:
    """Why the cache ``cache`` (in-root path) in ``driver_root`` does not serve the plan (empty when it does)."""
    root = Root(driver_root).snapshot()  # each SONAME's entry and published path resolved through one lstat cache
    try:
        entries = parse_ld_cache(root.read_bytes(cache, limit=LD_SO_CACHE_LIMIT), source=str(driver_root / cache))
    except (LdCacheFormatError, OSError) as exc:
        return [str(exc)]
    except Exception as exc:  # HostFileNotFound and other read errors: the cache must be (re)built
        return [f"{driver_root / cache}: {exc}"]
    flags = FLAGS_BY_MACHINE[plan.triplet.split("-", 1)[0]]
    problems = []
    for soname, published in sorted(plan.sonames.items()):
        entry = lookup(entries, soname, flags)
        if entry is None:
            problems.append(f"{soname}: not in the cache")
            continue
        found = root.resolve(entry.value)
        expected = root.resolve(published)
        if found != expected or not os.path.isfile(found):
            problems.append(f"{soname}: resolves to {entry.value} -> {found}, expected {expected}")
        elif soname in plan.nvidia_sonames and not found.name.endswith(f".so.{plan.version}"):
            problems.append(f"{soname}: resolves to {found.name}, not a file named *.so.{plan.version}")
    return problems


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
            f"libraries to version {plan.version}: " + "; ".join(problems[:5]),
            fix="the image's libraries must all be the loaded driver version with their SONAME links",
        )
    return NEW_CACHE


def closure_problems(plan: PublishPlan) -> list[str]:
    """Executables and libraries whose interpreter or DT_NEEDED the plan does not publish (pure); the names
    the scan accepted as missing for optional libraries (``PublishPlan.optional_missing``) are not counted."""
    by_path = {str(e.path): e for e in plan.entries}
    libdir = str(plan.libdir)
    problems = []
    for entry in plan.entries:
        facts = entry.source.elf if entry.source else None
        if facts is None:
            continue
        if facts.interpreter and not _published(by_path, facts.interpreter.lstrip("/")):
            problems.append(f"{entry.path}: interpreter {facts.interpreter} is not published")
        accepted = {n for real, n in plan.optional_missing if entry.source and real == str(entry.source.real)}
        for needed in facts.needed:
            if needed in accepted:
                continue
            if needed not in plan.sonames and not _published(by_path, f"{libdir}/{needed}"):
                problems.append(f"{entry.path}: needs {needed}, which is not published")
    return problems


def _published(by_path: dict[str, PlannedEntry], path: str) -> bool:
    for _ in range(40):
        entry = by_path.get(path)
        if entry is None or entry.kind != "link" or entry.target is None:
            return entry is not None
        path = os.path.normpath(os.path.join(os.path.dirname(path), entry.target))
    return False
