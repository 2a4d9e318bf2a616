"""/sys, and no /proc, inside the published root (docs/mps.md, docs/publish.md): the root is data, never the node.

Consumers that use the root as a tree of their own read its ``sys``: gpu-operator's validator reads
``<root>/sys/bus/pci/devices`` when the driver root is also its dev root, and exits 1 without it
(tests/integration/test_operator_validator.py); libcuda in NVIDIA's DRA driver's chrooted MPS server reads
``/sys`` too (``chroot /driver-root sh -c "nvidia-cuda-mps-control -d"`` where the root has an executable
``bin/sh``, kubernetes-sigs/dra-driver-nvidia-gpu templates/mps-control-daemon.tmpl.yaml @95932046). So a
sysfs (``SYS``) is mounted there, read-only: nothing writes through it, whoever gets the root.

No procfs. Earlier versions mounted a read-write one (``PROC_LEGACY``) for that MPS server: 550's and 555's
libcuda name their threads by opening /proc/self/task/<tid>/comm for writing. But every consumer of
/run/nvidia/driver got it, and a readOnly hostPath is read-only at its top mount only: root there could
open /proc/sys/kernel/core_pattern for writing (a program the kernel runs as host root), any uid listed
every process of the node's PID namespace with its command line, and /proc/<pid>/root of a visible process
leads to its filesystem, which a read-only procfs does not stop (the link leaves the procfs mount). The
real flow (tests/integration/test_procsys_real.py, Debian 535/550/555, no GPU) showed: 535 reaches the
driver's "no CUDA-capable device" error without a procfs; 550 and 555 need it writable (``subset=pid,
hidepid=invisible`` is enough, no sysfs needed for it) and fail with CUDA_ERROR_OPERATING_SYSTEM with a
read-only one (``ro``, with or without those options: the open for writing fails EROFS) as without one.
Those options are parsed in torvalds/linux fs/proc/root.c ``proc_parse_subset_param`` and
``proc_parse_hidepid_param`` (Linux 5.8 and later; read at Kingxukai/linux
9b44fff655e2c6f4cc53cb499dd2c038e99cb013). A read-only procfs buys nothing and no writable one is
published: so none, and ``init`` unmounts the one earlier versions mounted (they stay until the node
reboots otherwise). The DRA driver's chrooted MPS server of 550 and later then fails at cuInit (docs/mps.md).

Unless the cluster opts in: ``DRIVER_ROOT_PROCFS=mps-minimal`` (settings/) mounts ``PROC_MPS``, the measured
minimum for that server: ``subset=pid`` keeps only the pid directories (no /proc/sys, sysrq-trigger, kcore),
``hidepid=invisible`` hides every task the reader may not ptrace (fs/proc/base.c ``has_pid_permissions``:
``ptrace_may_access``): another uid sees its own processes only, and root without CAP_SYS_PTRACE none
holding capabilities it lacks (security/commoncap.c ``cap_ptrace_access_check``). A kernel without
``subset=pid`` refuses the mount (EINVAL): the opt-in is then refused, never a full procfs instead. Its
source ``nvidia-driver-proc-mps`` makes it ours: an unchanged restart keeps it, ``none`` unmounts it.

The sysfs is a fresh mount, not a bind of the container's /sys, so that its flags are its own and no
submount (binfmt_misc, cgroup) comes along. The kernel refuses it (EPERM) without CAP_SYS_ADMIN, and in a
user namespace other than the initial one unless a fully visible instance is there already (torvalds/linux
fs/namespace.c ``mount_too_revealing``, read at gregkh/linux 02689a8961869170600321a9de819351cc9e69be); a
privileged pod runs in the initial one. Where it fails, ``init`` warns with the fix and goes on.

Only where the root has its shell (the image's: always) and DRIVER_ROOT is init's own tmpfs
(driverroot/mount.py), shared: mounted inside it, it propagates to the node as the tmpfs does, stays when
the container stops and goes with it. A directory of another filesystem (an exec-capable RUN_DIR, a test's
temporary directory) never gets one: a host init does not own keeps no mount of ours. The mount point is
the root's ``sys`` directory (publish/plan.py), opened as a real directory of the root through
``O_NOFOLLOW`` descriptors; ``mount(8)`` runs in that directory and mounts on ``.`` uncanonicalized, so a
link planted there, or renamed over it while ``mount(8)`` starts, is never followed. An unmount takes the
path checked just before it (driverroot/rootpath.py). A restart finds the sysfs in its own mountinfo and
keeps it.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from driver_container.base.errors import CommandError, HostReadError, PublishError
from driver_container.base.paths import HostPaths
from driver_container.base.records import NamedRecord
from driver_container.driverroot.mount import MOUNT_SOURCE, describe, descriptor_path, is_ours, read_mounts
from driver_container.driverroot.rootpath import open_root, root_path, verified_root
from driver_container.formats.kernel.mountinfo import Mount, mount_containing, top_mount_at
from driver_container.formats.userspace_layout import ROOT_PROC, ROOT_SHELL, ROOT_SYS
from driver_container.runtime.dirtree import Tree

if TYPE_CHECKING:  # status reads the mounts through this module too: no subprocess import for it
    from driver_container.base.resolver import Root
    from driver_container.runtime.runner import Runner
    from driver_container.settings import RootProcfsChoice

log = logging.getLogger(__name__)


class PseudoFs(NamedRecord):
    path: str  # in the root
    fstype: str
    source: str  # what mountinfo shows as its source
    options: str


SYS = PseudoFs(ROOT_SYS, "sysfs", "nvidia-driver-sys", "ro,nosuid,nodev,noexec")
PROC_LEGACY = PseudoFs(ROOT_PROC, "proc", "nvidia-driver-proc", "nosuid,nodev,noexec")  # unmounted, never made
PROC_MPS = PseudoFs(ROOT_PROC, "proc", "nvidia-driver-proc-mps", "rw,nosuid,nodev,noexec,subset=pid,hidepid=invisible")
OPT_IN = "DRIVER_ROOT_PROCFS=mps-minimal"
SYS_FIX = (
    "run the driver container privileged with RUN_DIR mounted shared (mountPropagation: Bidirectional), on a "
    f"RUN_DIR that gets init's tmpfs {MOUNT_SOURCE} (the node's /run), as gpu-operator's driver DaemonSet "
    "does: init then mounts a read-only sysfs at the root's sys, which gpu-operator's validator and "
    "programs run chrooted in the root read"
)
PROC_FIX = (
    "unmount it on the host (umount DRIVER_ROOT/proc); a restarted init unmounts the one earlier versions "
    "mounted. Nothing needs it: the root is published without /proc (NVIDIA's DRA driver's MPS claims on "
    f"550 and later: set {OPT_IN} instead, docs/mps.md)"
)
PROC_MPS_NOTE = (
    f"init mounts a procfs there ({PROC_MPS.options}) for NVIDIA's DRA driver's chrooted MPS server: pid "
    "directories only, each reader seeing only the processes it may ptrace (all of them with CAP_SYS_PTRACE)"
)
PROC_MPS_OFF = "set DRIVER_ROOT_PROCFS=none where no MPS claim of NVIDIA's DRA driver needs it (docs/mps.md)"
PROC_MPS_FIX = (
    "needs Linux 5.8 or later (procfs subset=pid) and init's shared tmpfs at DRIVER_ROOT; or set "
    "DRIVER_ROOT_PROCFS=none (NVIDIA's DRA driver's MPS claims on 550 and later then fail at cuInit, docs/mps.md)"
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
    """Pure: None when a sysfs may be mounted in the root at ``driver_root`` (canonical), else why not."""
    top = top_mount_at(mounts, driver_root)
    if top is None or not is_ours(top):
        holder = mount_containing(mounts, driver_root)
        shown = describe(holder) if holder is not None else "no mount in the table"
        return f"{driver_root} is not init's own tmpfs {MOUNT_SOURCE} ({shown})"
    if not top.shared:
        return f"{describe(top)} is not shared: a mount made in it would stay in this container"
    return None


class ProcSys(NamedRecord):
    """What ``status`` shows: whether the root has its shell, and the procfs and sysfs at its proc and sys."""

    shell: bool
    proc: Mount | None  # none is wanted there
    sys: Mount | None


class RootMounts(NamedRecord):
    holder: Mount | None  # the mount holding DRIVER_ROOT
    proc_sys: ProcSys


def read_root_mounts(driver_root: Path, run_dir: Path, own_proc: Root) -> RootMounts | None:
    """One read of this process's own mountinfo (``own_proc``): DRIVER_ROOT's mount and those at its proc
    and sys; None where that file does not exist, HostReadError where it cannot be read."""
    mounts = read_mounts(own_proc)
    if mounts is None:
        return None
    target = root_path(driver_root, run_dir)
    found = ProcSys(has_shell(driver_root), mounted_at(mounts, target, PROC_LEGACY), mounted_at(mounts, target, SYS))
    return RootMounts(mount_containing(mounts, target), found)


def ensure_proc_sys(paths: HostPaths, runner: Runner, procfs: RootProcfsChoice = "none") -> int:
    """In the published root, where it has its shell: unmount a procfs of ours not wanted, then mount a
    read-only sysfs (and ``PROC_MPS`` with ``mps-minimal``) where DRIVER_ROOT is our shared tmpfs; how many
    were mounted now. Warns for a sysfs that cannot be made and a procfs that cannot be removed; a
    ``PROC_MPS`` that cannot be mounted is a PublishError."""
    if not has_shell(paths.driver_root):
        return 0  # no chroot consumer: one lstat on this path, nothing else (bench/startup.py)
    try:
        mounts = read_mounts(paths.own_proc)
        target = verified_root(paths.driver_root, paths.run_dir)
    except (HostReadError, PublishError) as exc:
        log.warning("no /sys mounted in %s: %s; %s", paths.driver_root, exc.message, SYS_FIX)
        return 0
    if mounts is None:
        log.warning(
            "no /sys mounted in %s: %s/self/mountinfo does not exist; %s",
            paths.driver_root,
            paths.own_proc.path,
            SYS_FIX,
        )
        return 0
    proc_left = _settle_proc(paths.driver_root, paths.run_dir, target, mounts, runner, keep=procfs == "mps-minimal")
    reason = why_not(mounts, target)
    if reason is not None:
        log.info("no /sys mounted in the root: %s (gpu-operator's validator reads it)", reason)
        if procfs == "mps-minimal":
            raise PublishError(f"{OPT_IN}: no procfs mounted in the root: {reason}", fix=PROC_MPS_FIX)
        return 0
    found = mounted_at(mounts, target, SYS)
    if found is not None:
        log.debug("%s/%s: %s is mounted already", target, SYS.path, describe(found))
    made = 0 if found is not None else _mount(paths, target, runner, SYS)
    if procfs == "mps-minimal" and not proc_left:
        made += _mount(paths, target, runner, PROC_MPS)
    return made


def _settle_proc(
    driver_root: Path, run_dir: Path, target: str, mounts: list[Mount], runner: Runner, *, keep: bool
) -> bool:
    """Unmount the procfs at the root's proc when it is ours and not wanted (earlier versions', or
    ``PROC_MPS`` without ``keep``); whether a procfs is left there."""
    point = f"{target}/{ROOT_PROC}"
    found = mounted_at(mounts, target, PROC_LEGACY)
    if found is None:
        return False
    if found.source not in (PROC_LEGACY.source, PROC_MPS.source):
        log.warning(
            "%s: %s is not init's: left mounted, and every consumer of the root reaches the node through it; %s",
            point,
            describe(found),
            PROC_FIX,
        )
        return True
    if keep and found.source == PROC_MPS.source:
        log.info("%s: %s is mounted already (%s)", point, describe(found), OPT_IN)
        return True
    try:  # checked just before umount takes the path (driverroot/rootpath.py: no descriptor held)
        os.close(open_root(driver_root, run_dir, ROOT_PROC))
    except PublishError:
        log.warning("%s is not a directory of the root (a link or a file?): nothing unmounted", point)
        return True
    failure = _failure(runner, ["umount", point])
    if failure is not None:
        log.warning("%s: %s; %s", point, failure, PROC_FIX)
        return True
    log.info("unmounted %s (%s): the root is published without /proc", point, describe(found))
    return False


def _mount(paths: HostPaths, target: str, runner: Runner, fs: PseudoFs) -> int:
    """``fs`` mounted at its place in the root; 1 when it was. A sysfs that cannot be mounted warns;
    ``PROC_MPS`` is a PublishError (the opt-in is never half-kept)."""
    point = f"{target}/{fs.path}"
    try:
        fd = open_root(paths.driver_root, paths.run_dir, fs.path)
    except PublishError:
        failure: str | None = f"{point} is not a directory of the root (a link or a file?): nothing mounted there"
    else:
        # mount(8) runs in the root's own directory, entered through an O_NOFOLLOW descriptor of it (its
        # /proc/self/fd entry; the child still holds it when it changes directory, before exec), and mounts
        # on "." uncanonicalized: a link renamed over the name meanwhile is never followed out of the root.
        try:
            failed = _failure(runner, mount_argv(fs), cwd=descriptor_path(paths.own_procfs_root, fd, point))
            failure = None if failed is None else f"{point}: {failed}"
        except PublishError as exc:
            failure = exc.message
        finally:
            os.close(fd)
    if failure is None:
        log.info("mounted %s %s at %s (%s) for the root's consumers", fs.fstype, fs.source, point, fs.options)
        return 1
    if fs == PROC_MPS:  # EINVAL without subset=pid: refused, never a full procfs in its place
        raise PublishError(f"{OPT_IN}: {failure}", path=point, fix=PROC_MPS_FIX)
    log.warning("%s; %s", failure, SYS_FIX)
    return 0


def _failure(runner: Runner, argv: list[str], cwd: str | None = None) -> str | None:
    """None when ``argv`` succeeded, else what went wrong."""
    try:
        done = runner.run(argv, check=False, cwd=cwd)
    except CommandError as exc:  # not found, timed out
        return exc.message
    if done.returncode != 0:
        detail = " ".join(line.strip() for line in done.stderr.strip().splitlines()[:2])
        return f"{' '.join(argv)} exited {done.returncode}: {detail}"
    return None
