"""Run ``ldconfig -r DRIVER_ROOT`` and check its cache with our own reader.

ld.so and the toolkit find libraries through ROOT/etc/ld.so.cache; the check requires every published
SONAME to resolve (with ld.so's binary search, for this architecture's flags) to the published file, and
every NVIDIA SONAME to a file named *.so.<version>: the legacy nvidia-container-cli keeps a library only
if its resolved name ends with the loaded module version (gpu-operator-contract.md section 6).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from driver_container.errors import PublishError
from driver_container.ldcache import FLAGS_BY_MACHINE, LdCacheFormatError, lookup, parse_ld_cache
from driver_container.paths import Root
from driver_container.publish.model import PublishPlan
from driver_container.runner import Runner

log = logging.getLogger(__name__)

CACHE = "etc/ld.so.cache"


def cache_problems(plan: PublishPlan, driver_root: Path) -> list[str]:
    """Why the cache in ``driver_root`` does not serve the plan (empty when it does)."""
    root = Root(driver_root)
    try:
        entries = parse_ld_cache(root.read_bytes(CACHE, limit=64 << 20), source=str(driver_root / CACHE))
    except (LdCacheFormatError, OSError) as exc:
        return [str(exc)]
    except Exception as exc:  # HostFileNotFound and other read errors: the cache must be (re)built
        return [f"{driver_root / CACHE}: {exc}"]
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


def refresh_cache(plan: PublishPlan, driver_root: Path, runner: Runner, *, changed: bool) -> bool:
    """Run ldconfig when the root changed or its cache does not verify; returns whether it ran."""
    if not changed and not cache_problems(plan, driver_root):
        return False
    runner.run(["ldconfig", "-r", str(driver_root)])
    problems = cache_problems(plan, driver_root)
    if problems:
        raise PublishError(
            f"{driver_root / CACHE} written by `ldconfig -r {driver_root}` does not resolve the published "
            f"libraries to version {plan.version}: " + "; ".join(problems[:5]),
            fix="the image's libraries must all be the loaded driver version with their SONAME links",
        )
    return True
