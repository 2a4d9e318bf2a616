"""The ELF interpreter and transitive DT_NEEDED closure of the published objects, resolved like ld.so.

ld.so looks a DT_NEEDED name up in /etc/ld.so.cache, then in its built-in system dirs (Debian
multiarch: /lib/<triplet>, /usr/lib/<triplet>, then /lib, /usr/lib; glibc elf/dl-load.c). Objects of
another ELF class or machine are skipped, as ld.so skips them. DT_RUNPATH dirs are honoured when they
are absolute. Names provided by the NVIDIA libraries themselves need no resolution.
"""

from __future__ import annotations

from collections import deque
from pathlib import PurePosixPath

from driver_container.errors import UserspaceError
from driver_container.formats.elfdeps import ElfDeps
from driver_container.formats.ldcache import FLAGS_BY_MACHINE, CacheEntry, lookup
from driver_container.paths import Root
from driver_container.publish.model import SourceFile
from driver_container.publish.sources import ElfFacts, source_file


def _system_dirs(triplet: str) -> list[str]:
    return [f"lib/{triplet}", f"usr/lib/{triplet}", "lib64", "usr/lib64", "lib", "usr/lib"]


def _compatible(src: SourceFile, want: ElfDeps) -> bool:
    return src.elf is not None and src.elf.machine == want.machine and src.elf.elf_class == want.elf_class


def _resolve_needed(
    root: Root, triplet: str, cache: list[CacheEntry], name: str, user: SourceFile, elf: ElfFacts
) -> SourceFile:
    assert user.elf is not None
    candidates: list[str] = []
    hit = lookup(cache, name, FLAGS_BY_MACHINE[triplet.split("-", 1)[0]])
    if hit is not None:
        candidates.append(hit.value)
    dirs = [*(d for d in user.elf.runpath if d.startswith("/")), *_system_dirs(triplet)]
    candidates += [f"{d.strip('/')}/{name}" for d in dirs]
    for inner in candidates:
        if root.lstat(inner) is None:
            continue
        src = source_file(root, inner, elf=elf)
        if _compatible(src, user.elf):
            return src
    raise UserspaceError(
        f"{user.shown} needs {name}, which is neither in USERSPACE_ROOT's ld.so.cache nor in "
        f"{', '.join('/' + d.strip('/') for d in dirs)}",
        fix=f"install the package providing {name} in the driver image",
    )


def resolve_closure(
    root: Root,
    triplet: str,
    cache: list[CacheEntry],
    libraries: dict[str, SourceFile],
    binaries: dict[str, SourceFile],
    elf: ElfFacts,
) -> tuple[tuple[PurePosixPath, SourceFile] | None, dict[str, SourceFile]]:
    """(interpreter path and file, {DT_NEEDED name: file}) for everything the published objects load."""
    provided = {src.elf.soname for src in libraries.values() if src.elf and src.elf.soname}
    interpreter: tuple[PurePosixPath, SourceFile] | None = None
    deps: dict[str, SourceFile] = {}
    queue = deque([*libraries.values(), *binaries.values()])
    while queue:
        user = queue.popleft()
        if user.elf is None:
            continue
        if user.elf.interpreter and interpreter is None:
            interp = PurePosixPath(user.elf.interpreter)
            interpreter = (interp, source_file(root, interp, elf=elf))
        elif user.elf.interpreter and interpreter is not None and str(interpreter[0]) != user.elf.interpreter:
            raise UserspaceError(
                f"{user.shown} uses interpreter {user.elf.interpreter}, others {interpreter[0]}",
                fix="publish binaries for one architecture only",
            )
        for name in user.elf.needed:
            if name in provided or name in deps:
                continue
            deps[name] = _resolve_needed(root, triplet, cache, name, user, elf)
            queue.append(deps[name])
    return interpreter, deps
