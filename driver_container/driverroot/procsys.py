"""/proc and /sys inside the published root, for the programs NVIDIA's DRA driver runs chrooted in it (docs/publish.md).

Its MPS control daemon runs ``chroot /driver-root sh -c "nvidia-cuda-mps-control -d"`` when the root has
an executable ``bin/sh`` (kubernetes-sigs/dra-driver-nvidia-gpu templates/mps-control-daemon.tmpl.yaml
@95932046). libcuda in the nvidia-cuda-mps-server it starts reads /proc (modules, cpuinfo, self/maps,
sys/vm/mmap_min_addr) and /sys (bus/pci/devices/*/config, devices/system/cpu/online,
module/nvidia/initstate), and 550's and 555's name their threads by opening /proc/self/task/<tid>/comm
for writing (strace): without a procfs, or with a read-only one, their cuInit returns
CUDA_ERROR_OPERATING_SYSTEM (tests/integration/test_procsys_real.py). NVIDIA's driver container gives its
root its container's /proc through ``mount --rbind /`` and, deliberately, no /sys (NVIDIA/gpu-driver-container
ubuntu22.04/nvidia-driver ``_mount_rootfs`` @06a208ca: ``mount --make-runbindable /sys`` first).

Fresh mounts, not binds of the container's own, so that their flags are theirs and no submount of the
container's /proc or /sys (cgroup, binfmt_misc) comes along:
- procfs (``PROC``), read-write for those thread names, nosuid,nodev,noexec. A new procfs shows the PID
  namespace of the process that mounts it, here ``init``'s: in gpu-operator's driver pod the node's
  (``hostPID: true``, NVIDIA/gpu-operator assets/state-driver/0500_daemonset.yaml @a22dbf67; on Talos 1.14
  with workloadIsolation the pods' sandbox namespace, docs/talos.md section 7). The DRA driver's MPS pod is
  ``hostPID: true`` too (the template above), so it is the daemon's own namespace, which it must be: the
  thread names go to /proc/self/task/<tid>/comm with the tid as the thread's own namespace numbers it
  (a procfs of an ancestor namespace resolves /proc/self but has no such task: CUDA_ERROR_OPERATING_SYSTEM,
  seen). Since Linux 5.8 each procfs mount is an instance of its own: these options change no other /proc.
- sysfs (``SYS``), read-only (libcuda only reads it), nosuid,nodev,noexec.
The kernel refuses such a mount (EPERM) without CAP_SYS_ADMIN, and in a user namespace other than the
initial one unless a fully visible instance is there already (torvalds/linux fs/namespace.c
``mount_too_revealing``, read at gregkh/linux 02689a8961869170600321a9de819351cc9e69be); a privileged pod
runs in the initial one. Where it fails, ``init`` warns with the fix and goes on: MPS through the DRA
driver is optional.

Only where the root has its shell (no chroot consumer otherwise) and DRIVER_ROOT is init's own tmpfs
(driverroot/mount.py), shared: mounted inside it they propagate to the node as it does (the operator's
Bidirectional /run/nvidia), stay when the container stops and go with it. A directory of another
filesystem (an operator's exec-capable RUN_DIR, a test's temporary directory) never gets one: a host init
does not own keeps no mount of ours. The mount points are the root's ``proc`` and ``sys`` directories
(publish/plan.py), opened as real directories of the root through ``O_NOFOLLOW`` descriptors; ``mount(8)``
runs in that directory and mounts on ``.`` uncanonicalized, so a link planted there, or renamed over it
while ``mount(8)`` starts, is never followed.

A restart finds them in its own mountinfo and keeps them; a procfs there that does not show this process
(the PID namespace of a container started without hostPID, since gone) is replaced.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from driver_container.driverroot.mount import MOUNT_SOURCE, describe, descriptor_path, is_ours, read_mounts
from driver_container.driverroot.rootpath import open_root, root_path, verified_root
from driver_container.errors import CommandError, HostReadError, PublishError
from driver_container.formats.kernel.mountinfo import Mount, mount_containing, top_mount_at
from driver_container.formats.userspace_layout import ROOT_PROC, ROOT_SHELL, ROOT_SYS
from driver_container.paths import HostPaths
from driver_container.records import NamedRecord
from driver_container.runtime.dirtree import Tree

if TYPE_CHECKING:  # status reads the mounts through this module too: no subprocess import for it
    from driver_container.runtime.runner import Runner

log = logging.getLogger(__name__)


class PseudoFs(NamedRecord):
    path: str  # in the root
    fstype: str
    source: str  # what mountinfo shows as its source
    options: str


PROC = PseudoFs(ROOT_PROC, "proc", "nvidia-driver-proc", "nosuid,nodev,noexec")
SYS = PseudoFs(ROOT_SYS, "sysfs", "nvidia-driver-sys", "ro,nosuid,nodev,noexec")
PSEUDO_FS = (PROC, SYS)
PROC_SYS_FIX = (
    "run the driver container privileged with hostPID (gpu-operator's driver DaemonSet does) and RUN_DIR "
    f"mounted shared (mountPropagation: Bidirectional), on a RUN_DIR that gets init's tmpfs {MOUNT_SOURCE} "
    "(the node's /run): init then mounts a procfs and a sysfs in the root; MPS claims of NVIDIA's DRA "
    "driver need them, nothing else does"
)


def mount_argv(fs: PseudoFs) -> list[str]:
    """mount(8) onto its working directory, taken as given (``--no-canonicalize``: no realpath of it)."""
    return ["mount", "--no-canonicalize", "-t", fs.fstype, "-o", fs.options, fs.source, "."]


def has_shell(driver_root: Path) -> bool:
    """The published root's shell is there (a regular file, reached without following a link): a program
    may be run chrooted in it."""
    tree = Tree(driver_root)
    try:
        st = tree.lstat(PurePosixPath(ROOT_SHELL))
    finally:
        tree.close()
    return st is not None and stat.S_ISREG(st.st_mode)


def mounted_at(mounts: list[Mount], driver_root: str, fs: PseudoFs) -> Mount | None:
    """The visible mount at ``driver_root``/``fs.path`` when it is of ``fs``'s type, whoever made it."""
    top = top_mount_at(mounts, f"{driver_root}/{fs.path}")
    return top if top is not None and top.fstype == fs.fstype else None


def why_not(mounts: list[Mount], driver_root: str) -> str | None:
    """Pure: None when /proc and /sys may be mounted in the root at ``driver_root`` (resolved), else why not."""
    top = top_mount_at(mounts, driver_root)
    if top is None or not is_ours(top):
        holder = mount_containing(mounts, driver_root)
        shown = describe(holder) if holder is not None else "no mount in the table"
        return f"{driver_root} is not init's own tmpfs {MOUNT_SOURCE} ({shown})"
    if not top.shared:
        return f"{describe(top)} is not shared: a mount made in it would stay in this container"
    return None


class ProcSys(NamedRecord):
    """What ``status`` shows: whether the root has its shell, and the mounts at its proc and sys."""

    shell: bool
    proc: Mount | None
    sys: Mount | None

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(fs.path for fs, m in zip(PSEUDO_FS, (self.proc, self.sys), strict=True) if m is None)


class RootMounts(NamedRecord):
    holder: Mount | None  # the mount holding DRIVER_ROOT
    proc_sys: ProcSys


def read_root_mounts(paths: HostPaths) -> RootMounts | None:
    """One read of this process's own mountinfo: DRIVER_ROOT's mount and those at its proc and sys; None
    where that file does not exist, HostReadError where it cannot be read."""
    mounts = read_mounts(paths.own_proc)
    if mounts is None:
        return None
    target = root_path(paths)
    found = [mounted_at(mounts, target, fs) for fs in PSEUDO_FS]
    return RootMounts(mount_containing(mounts, target), ProcSys(has_shell(paths.driver_root), *found))


def ensure_proc_sys(paths: HostPaths, runner: Runner) -> int:
    """Mount a procfs and a sysfs in the published root where it has its shell and DRIVER_ROOT is our
    tmpfs; how many were mounted now. Never raises for a mount that cannot be made: it warns."""
    if not has_shell(paths.driver_root):
        return 0  # no chroot consumer: one lstat on this path, nothing else (bench/startup.py)
    try:
        mounts = read_mounts(paths.own_proc)
    except HostReadError as exc:
        log.warning("no /proc or /sys mounted in %s: %s; %s", paths.driver_root, exc.message, PROC_SYS_FIX)
        return 0
    if mounts is None:
        log.warning(
            "no /proc or /sys mounted in %s: %s/self/mountinfo does not exist; %s",
            paths.driver_root,
            paths.own_proc.path,
            PROC_SYS_FIX,
        )
        return 0
    try:
        target = verified_root(paths)
    except PublishError as exc:
        log.warning("no /proc or /sys mounted in the root: %s", exc.message)
        return 0
    reason = why_not(mounts, target)
    if reason is not None:
        log.info("no /proc or /sys mounted in the root: %s (MPS through NVIDIA's DRA driver needs them)", reason)
        return 0
    return sum(_ensure_one(paths, target, fs, mounts, runner) for fs in PSEUDO_FS)


def _ensure_one(paths: HostPaths, target: str, fs: PseudoFs, mounts: list[Mount], runner: Runner) -> int:
    point = f"{target}/{fs.path}"
    fd = _open_point(paths, fs, point)
    if fd is None:
        return 0
    found = mounted_at(mounts, target, fs)
    if found is not None:
        if fs is not PROC or _shows_this_process(fd):
            os.close(fd)
            log.debug("%s: %s is mounted already", point, describe(found))
            return 0
        log.warning("%s (%s) does not show this process (another PID namespace): replacing it", point, describe(found))
        os.close(fd)  # checked just now; a descriptor held in it would keep it busy
        if not _run(runner, ["umount", point], point):
            return 0
        fd = _open_point(paths, fs, point)
        if fd is None:
            return 0
    # mount(8) runs in the root's own directory, entered through an O_NOFOLLOW descriptor of it (its
    # /proc/self/fd entry; the child still holds it when it changes directory, before exec), and mounts on
    # "." uncanonicalized: a link renamed over the name meanwhile is never followed out of the root.
    try:
        if not _run(runner, mount_argv(fs), point, cwd=descriptor_path(paths, fd, point)):
            return 0
    except PublishError as exc:
        log.warning("%s; %s", exc.message, PROC_SYS_FIX)
        return 0
    finally:
        os.close(fd)
    log.info("mounted %s %s at %s (%s) for programs run chrooted in the root", fs.fstype, fs.source, point, fs.options)
    return 1


def _open_point(paths: HostPaths, fs: PseudoFs, point: str) -> int | None:
    try:
        return open_root(paths, fs.path)
    except PublishError:
        log.warning("%s is not a directory of the root (a link or a file?): nothing mounted there", point)
        return None


def _shows_this_process(fd: int) -> bool:
    try:
        os.readlink("self", dir_fd=fd)  # the kernel answers ENOENT where this process has no pid in it
    except OSError:
        return False
    return True


def _run(runner: Runner, argv: list[str], point: str, cwd: str | None = None) -> bool:
    try:
        done = runner.run(argv, check=False, cwd=cwd)
    except CommandError as exc:  # not found, timed out
        log.warning("%s: %s; %s", point, exc.message, PROC_SYS_FIX)
        return False
    if done.returncode != 0:
        detail = " ".join(line.strip() for line in done.stderr.strip().splitlines()[:2])
        log.warning("%s: %s exited %d: %s; %s", point, " ".join(argv), done.returncode, detail, PROC_SYS_FIX)
        return False
    return True
