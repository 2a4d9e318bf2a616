"""Proof that the published DRIVER_ROOT can be used the way its consumers use it, made before ``Ready``
and by ``status`` (docs/init.md, step 6b).

Its consumers execute from it and map from it: gpu-operator's validator runs ``chroot <root> nvidia-smi``
and LD_PRELOADs the root's libnvidia-ml (validator/main.go), the device plugin and DCGM dlopen
libnvidia-ml.so.1, the container toolkit's ``update-ldcache`` hook may run the root's ldconfig. A mount
table only describes that; the kernel decides it: ``execve`` fails with EACCES and ``mmap(PROT_EXEC)`` with
EPERM on a ``noexec`` mount (fs/exec.c ``do_open_execat`` -> ``path_noexec``; mm/mmap.c ``do_mmap``), and
a device node cannot be opened on a ``nodev`` one (fs/namei.c ``may_open_dev``). So the proof does both for
real: it executes the static ldconfig every published root carries (``publish/plan.py``: static, so it
needs no loader from the root or from this image) and maps a published NVIDIA library executable; the
``nodev`` flag comes from statvfs, because opening a device node of a GPU is not free of side effects.

Cost on every start: one fork/exec of a static binary and one mmap (~2 ms, bench/startup.py). The exec
gets ``PROOF_TIMEOUT_S`` or what is left of the caller's ``Deadline``, whichever is less (``status
--verify``: the proof and the hashing share one 10 s).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path, PurePosixPath

from driver_container.base.errors import CommandError, HostReadError
from driver_container.base.fileread import READ_FLAGS, regular_stat
from driver_container.base.records import NamedRecord
from driver_container.base.resolver import Root
from driver_container.driverroot.mount import RootFlags, read_root_flags
from driver_container.runtime.deadline import Deadline
from driver_container.runtime.runner import Runner

PROOF_BINARY = PurePosixPath("sbin/ldconfig.real")  # plan.py publishes a static ldconfig here, always
PROOF_ARGS = ("--version",)  # prints one line and exits 0: no cache is read or written
# What the validator and the device plugin map first; either one is in every root that passed verify.
PROOF_LIBRARIES = ("libnvidia-ml.so.1", "libcuda.so.1")
LIBRARY_PARENT = PurePosixPath("usr/lib")  # the canonical layout: usr/lib/<triplet>/ (publish/plan.py)
PROOF_TIMEOUT_S = 10.0


class RootProof(NamedRecord):
    """The outcome: ``failures`` is empty when the root can be executed and mapped from."""

    flags: RootFlags
    failures: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failures


def prove_root_usable(driver_root: Path, runner: Runner, deadline: Deadline | None = None) -> RootProof:
    """Execute the published static ldconfig and map a published library executable, for real; the exec
    within ``PROOF_TIMEOUT_S`` and what is left of ``deadline``."""
    flags = read_root_flags(driver_root)
    root = Root(driver_root)
    # In hundredths, rounded down: the message says "timed out after 9.95 s", and never past the deadline.
    timeout = PROOF_TIMEOUT_S if deadline is None else min(PROOF_TIMEOUT_S, int(deadline.left() * 100) / 100)
    failures = [f for f in (_exec_failure(root, runner, timeout), _map_failure(root)) if f]
    if flags.nodev:
        failures.append(f"{flags.path} is mounted nodev (statvfs): its device nodes cannot be opened")
    return RootProof(flags, tuple(failures))


def proof_argv(driver_root: Path) -> list[str]:
    """What the proof runs (tests assert it): the binary by its resolved path inside the root."""
    return [str(Root(driver_root).resolve(PROOF_BINARY)), *PROOF_ARGS]


def _exec_failure(root: Root, runner: Runner, timeout: float) -> str:
    try:
        argv = proof_argv(root.path)
        if not root.is_file(PROOF_BINARY):
            return f"{PROOF_BINARY} is not a regular file in the published root"
        runner.exit_status(argv, timeout=timeout)  # any exit status: the kernel ran it
    except (CommandError, HostReadError) as exc:
        return f"executing {root.path / PROOF_BINARY}: {exc.message}"
    return ""


def find_proof_library(root: Root) -> PurePosixPath | None:
    """The first of ``PROOF_LIBRARIES`` in usr/lib/<dir>/ of the root (links resolved inside it)."""
    for soname in PROOF_LIBRARIES:
        for directory in root.listdir(LIBRARY_PARENT):
            inner = LIBRARY_PARENT / directory / soname
            if root.is_file(inner):
                return inner
    return None


def _map_failure(root: Root) -> str:
    try:
        inner = find_proof_library(root)
        if inner is None:
            return f"none of {', '.join(PROOF_LIBRARIES)} is in {LIBRARY_PARENT}/*/ of the published root"
        # Opened from the root with no link at any component (resolver.Root.open_resolved, base/beneath.py).
        fd, real = root.open_resolved(inner, READ_FLAGS)
    except HostReadError as exc:
        return exc.message
    try:
        map_executable(fd)
    except OSError as exc:
        return f"mapping {real} executable (mmap PROT_EXEC): {exc.strerror}"
    return ""


def map_executable(fd: int) -> None:
    """mmap one page of a regular file PROT_READ|PROT_EXEC, as the dynamic loader does; OSError if refused.
    Closes ``fd``."""
    try:
        st = regular_stat(fd)
        if st is None or st.st_size == 0:
            raise OSError(0, "not a non-empty regular file")
        length = min(st.st_size, mmap.PAGESIZE)
        with mmap.mmap(fd, length, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC):
            pass
    finally:
        os.close(fd)
