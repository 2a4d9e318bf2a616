"""The ELF interpreter and transitive DT_NEEDED closure of the published objects, resolved like ld.so.

ld.so looks a DT_NEEDED name up in /etc/ld.so.cache, then in its built-in system dirs (Debian
multiarch: /lib/<triplet>, /usr/lib/<triplet>, then /lib, /usr/lib; glibc elf/dl-load.c). Objects of
another ELF class or machine are skipped, as ld.so skips them. DT_RUNPATH dirs are honoured when they
are absolute. Names provided by the NVIDIA libraries themselves need no resolution. How strict a missing
name is depends on the object's role (``roles``).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from driver_container.base.errors import UserspaceError
from driver_container.base.resolver import Root
from driver_container.formats.elffacts import ElfDeps
from driver_container.formats.ldcache import FLAGS_BY_MACHINE, CacheEntry, lookup
from driver_container.publish.model import SourceFile
from driver_container.publish.sources import ElfFacts, source_file

log = logging.getLogger(__name__)

# Candidate paths one closure may look up: DT_NEEDED names x search directories grows as a product, and
# the facts may come from the manifest or the image's index as well as from the file (elfdeps caps those
# it reads). The images' closures look up 114-398 paths (measured on .cache/artefacts); 8192 is 20x that
# and ~0.1 s of lookups, where 2000 names x 2000 RUNPATH directories took 40 s.
MAX_LOOKUPS = 8192
# Components of a candidate path: resolving one inside the root costs the square of its depth (each
# component is looked up by its whole prefix), ~55 ms at 2000 components. Real candidates have <= 8
# (usr/lib/x86_64-linux-gnu/nvidia/current/NAME); deeper ones come only from crafted search dirs, DT_NEEDED
# paths or ld.so.cache values, and are taken as absent.
MAX_CANDIDATE_DEPTH = 64
_NAMES_SHOWN = 20  # missing names one warning lists (init's log is read by people and archived by bug-report)


def _system_dirs(triplet: str) -> list[str]:
    return [f"lib/{triplet}", f"usr/lib/{triplet}", "lib64", "usr/lib64", "lib", "usr/lib"]


def _compatible(src: SourceFile, want: ElfDeps) -> bool:
    return src.elf is not None and src.elf.machine == want.machine and src.elf.elf_class == want.elf_class


def _resolve_needed(
    root: Root, triplet: str, cache: list[CacheEntry], name: str, user: SourceFile, elf: ElfFacts, closure: Closure
) -> SourceFile:
    assert user.elf is not None
    candidates: list[str] = []
    hit = lookup(cache, name, FLAGS_BY_MACHINE[triplet.split("-", 1)[0]])
    if hit is not None:
        candidates.append(hit.value)
    dirs = list(dict.fromkeys([*(d for d in user.elf.runpath if d.startswith("/")), *_system_dirs(triplet)]))
    candidates += [f"{d.strip('/')}/{name}" for d in dirs]
    for inner in candidates:
        if inner.count("/") >= MAX_CANDIDATE_DEPTH:
            log.debug("%s: not looking up %.200s...: over %d components", user.shown, inner, MAX_CANDIDATE_DEPTH)
            continue
        closure.lookups += 1
        if closure.lookups > MAX_LOOKUPS:
            raise UserspaceError(
                f"{user.shown}: resolving the DT_NEEDED names of the published objects takes over {MAX_LOOKUPS} "
                "lookups (real images need a few hundred): a crafted or corrupt object",
                path=user.shown,
                fix="remove the object with that many DT_NEEDED names or DT_RUNPATH directories from the image",
            )
        if root.lstat(inner) is None:
            continue
        src = source_file(root, inner, elf=elf)
        if _compatible(src, user.elf):
            return src
    raise UserspaceError(
        f"{user.shown} needs {name}, which is neither in USERSPACE_ROOT's ld.so.cache nor in "
        f"{', '.join('/' + d.strip('/') for d in dirs)}",
        path=user.shown,
        fix=f"install the package providing {name} in the driver image",
    )


@dataclass
class Closure:
    """What the published objects load: the interpreter, {DT_NEEDED name: file}, and the names an optional
    object needs that the image lacks ((real path of the object, name); published without them)."""

    interpreter: tuple[PurePosixPath, SourceFile] | None = None
    dependencies: dict[str, SourceFile] = field(default_factory=dict)
    missing: list[tuple[str, str]] = field(default_factory=list)
    lookups: int = 0  # candidate paths looked up so far (MAX_LOOKUPS)
    # (name, search directories) pairs found in none of them: tried once, however many objects need them.
    unresolved: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)


def resolve_closure(
    root: Root,
    triplet: str,
    cache: list[CacheEntry],
    provided: set[str],
    required: list[SourceFile],
    optional: list[SourceFile],
    elf: ElfFacts,
) -> Closure:
    """Resolve the closure of ``required`` first (a missing name is an error), then of ``optional`` (a
    missing name is a warning). ``provided``: SONAMEs the published NVIDIA libraries give themselves.
    Whatever the required objects load is required too, even when an optional one also needs it."""
    closure = Closure()
    for objects, strict in ((required, True), (optional, False)):
        queue = deque(objects)
        while queue:
            user = queue.popleft()
            if user.elf is None:
                continue
            _check_interpreter(root, closure, user, elf)
            lacking = []
            for name in user.elf.needed:
                if name in provided or name in closure.dependencies:
                    continue
                if (name, user.elf.runpath) in closure.unresolved and not strict:
                    lacking.append(name)
                    continue
                try:
                    closure.dependencies[name] = _resolve_needed(root, triplet, cache, name, user, elf, closure)
                except UserspaceError:
                    if strict or closure.lookups > MAX_LOOKUPS:
                        raise
                    closure.unresolved.add((name, user.elf.runpath))
                    lacking.append(name)
                    continue
                queue.append(closure.dependencies[name])
            if lacking:
                more = f" and {len(lacking) - _NAMES_SHOWN} more" if len(lacking) > _NAMES_SHOWN else ""
                log.warning(
                    "%s needs %s%s, which USERSPACE_ROOT does not have; published without: only a workload "
                    "loading it is affected",
                    user.shown,
                    ", ".join(lacking[:_NAMES_SHOWN]),
                    more,
                )
                closure.missing += [(str(user.real), name) for name in lacking]
    return closure


def _check_interpreter(root: Root, closure: Closure, user: SourceFile, elf: ElfFacts) -> None:
    assert user.elf is not None
    if not user.elf.interpreter:
        return
    if closure.interpreter is None:
        interp = PurePosixPath(user.elf.interpreter)
        closure.interpreter = (interp, source_file(root, interp, elf=elf))
    elif str(closure.interpreter[0]) != user.elf.interpreter:
        raise UserspaceError(
            f"{user.shown} uses interpreter {user.elf.interpreter}, others {closure.interpreter[0]}",
            path=user.shown,
            fix="publish binaries for one architecture only",
        )
