"""DRIVER_ROOT's own mount: an exec-capable tmpfs where the filesystem holding it is noexec or nodev.

Talos mounts /run as a tmpfs with ``nosuid,nodev,noexec`` (siderolabs/talos
internal/pkg/mount/v3/helpers.go ``PseudoLate``: ``WithSecure()`` = MOUNT_ATTR_NOSUID|MOUNT_ATTR_NODEV,
``WithNoExec()``; commit ad8823176e75b9cd07647ddde13c34f2ab77c663). A plain directory /run/nvidia/driver
inherits those flags for everyone who reaches it (a hostPath bind copies the source mount's flags), so
the validator could not run ``<root>/usr/bin/nvidia-smi`` nor the device plugin map libnvidia-ml.
NVIDIA's script escapes this by accident: its ``mount --rbind /`` puts the container's root there.

Why a tmpfs and not DRIVER_ROOT bound onto itself and remounted ``exec,dev``:
- it is recognisable: its source is ``MOUNT_SOURCE``, so a restarted container keeps it and a leftover
  rbind of NVIDIA's script (an overlay or the node's root filesystem) is told apart by mountinfo alone;
  a self-bind of /run would look like any other bind of /run;
- its flags are its own (nosuid only), whatever the parent mount carries or later gains;
- it starts empty: nothing published before it (on the noexec directory) is mistaken for its content.
What we give up: a directory published into before the mount existed stays hidden below it (a few
hundred MB of the node's /run tmpfs) until the node reboots.

The mount is made through the operator's Bidirectional ``/run/nvidia`` (rshared), so it propagates to
the host and outlives the container; a restarted container finds it in its own mountinfo (the kubelet's
rbind of /run/nvidia carries it) and keeps it.

Who decides what (docs/publish.md): whether a mount is needed comes from the kernel, ``statvfs`` of DRIVER_ROOT
(the flags exec and mmap obey); this process's own mountinfo (OWN_PROCFS_ROOT, not the host view
PROCFS_ROOT, which may have no ``self/``) only says whether ours is there and whether a new one would
propagate. Whatever they said, ``driverroot/proof.py`` then proves the published root usable before Ready.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from driver_container.base.errors import CommandError, HostReadError, PublishError
from driver_container.base.paths import HostPaths
from driver_container.base.records import NamedRecord
from driver_container.base.resolver import Root
from driver_container.driverroot.rootpath import open_root, root_path
from driver_container.formats.kernel.mountinfo import Mount, mount_containing, parse_mountinfo, top_mount_at

if TYPE_CHECKING:  # status reads mounts through this module too: no subprocess import for it
    from driver_container.runtime.runner import Runner

log = logging.getLogger(__name__)

MOUNT_SOURCE = "nvidia-driver-root"  # the "source" of our tmpfs in mountinfo: what makes it ours
MOUNT_OPTIONS = "mode=0755,nosuid"  # no setuid file is ever published; exec and dev are what we need
BLOCKING_OPTIONS = ("noexec", "nodev")  # noexec: no exec/mmap(PROT_EXEC); nodev: /dev/nvidia* unusable
MOUNTINFO = "self/mountinfo"
MOUNTINFO_LIMIT = 16 << 20
# The remedy wherever a published root cannot be executed from (init before Ready, status: driverroot/proof.py).
UNUSABLE_ROOT_FIX = (
    "restart the driver container privileged (CAP_SYS_ADMIN; gpu-operator's driver DaemonSet is) with RUN_DIR "
    f"mounted shared (mountPropagation: Bidirectional): `init` then mounts a tmpfs {MOUNT_SOURCE} at "
    "DRIVER_ROOT; or set RUN_DIR to a filesystem mounted without noexec and nodev"
)


def is_ours(mount: Mount) -> bool:
    return mount.fstype == "tmpfs" and mount.source == MOUNT_SOURCE


def blocking_options(mount: Mount) -> tuple[str, ...]:
    """The per-mount options of ``mount`` that keep consumers from using a driver root on it."""
    return tuple(o for o in BLOCKING_OPTIONS if mount.has(o))


def describe(mount: Mount) -> str:
    return f"{mount.fstype} {mount.source} at {mount.mount_point} ({','.join(mount.options)})"


class RootFlags(NamedRecord):
    """What the kernel enforces at DRIVER_ROOT: statvfs(2)'s ``f_flag`` (ST_NOEXEC, ST_NODEV are the
    mount's MNT_NOEXEC/MNT_NODEV, fs/statfs.c ``flags_by_mnt``). A mount table can be absent, unreadable
    or another namespace's; these flags are the ones exec(2) and mmap(2) check."""

    path: str  # where statvfs was asked: DRIVER_ROOT, or its nearest existing parent before it is made
    noexec: bool
    nodev: bool

    @property
    def blocking(self) -> tuple[str, ...]:
        return tuple(name for name, on in zip(BLOCKING_OPTIONS, (self.noexec, self.nodev), strict=True) if on)

    def describe(self) -> str:
        return f"{self.path} is mounted {','.join(self.blocking) or 'exec,dev'} (statvfs)"


def read_root_flags(driver_root: Path) -> RootFlags:
    """statvfs of DRIVER_ROOT, or of its nearest existing parent (the mount it will be created on)."""
    path = driver_root
    while True:
        try:
            flags = os.statvfs(path).f_flag
        except (FileNotFoundError, NotADirectoryError):
            if path == path.parent:
                raise
            path = path.parent
            continue
        except OSError as exc:
            raise HostReadError(f"{path}: statvfs: {exc.strerror}", path=path) from exc
        return RootFlags(str(path), bool(flags & os.ST_NOEXEC), bool(flags & os.ST_NODEV))


def root_flags_of(fd: int, shown: str) -> RootFlags:
    """statvfs of the directory ``fd`` (DRIVER_ROOT, opened without following a link)."""
    try:
        flags = os.statvfs(fd).f_flag
    except OSError as exc:
        raise HostReadError(f"{shown}: statvfs: {exc.strerror}", path=shown) from exc
    return RootFlags(shown, bool(flags & os.ST_NOEXEC), bool(flags & os.ST_NODEV))


# "keep": ours is there; "mount": make ours; "none": the filesystem there allows exec.
RootMountAction = Literal["keep", "mount", "none"]


class RootMountDecision(NamedRecord):
    """What to do at DRIVER_ROOT; ``holder`` is the mount that holds it now (None: unknown)."""

    action: RootMountAction
    holder: Mount | None
    reason: str


def decide(flags: RootFlags, mounts: list[Mount] | None, driver_root: str) -> RootMountDecision:
    """Pure: the decision for DRIVER_ROOT (resolved path) once leftovers are gone. ``flags`` (statvfs)
    decide whether a mount is needed; ``mounts`` (this process's own mountinfo, None where it could not
    be read) only say whether ours is there already and which mount a new one would propagate from."""
    top = top_mount_at(mounts, driver_root) if mounts else None
    if top is not None and is_ours(top):
        return RootMountDecision("keep", top, f"{driver_root} is already our {describe(top)}")
    holder = mount_containing(mounts, driver_root) if mounts else None
    shown = f" ({describe(holder)})" if holder is not None else ""
    if not flags.blocking:
        return RootMountDecision("none", holder, f"{flags.describe()}{shown}: no mount of ours is needed")
    return RootMountDecision(
        "mount", holder, f"{flags.describe()}{shown}: {'/'.join(flags.blocking)} would stop consumers"
    )


def leftovers_at(mounts: list[Mount], driver_root: str) -> list[Mount]:
    """The mounts stacked on DRIVER_ROOT above ours (all of them when ours is not there), top first:
    a previous driver container's, to be unmounted in that order."""
    stack = {m.mount_id: m for m in mounts if m.mount_point == driver_root}
    found: list[Mount] = []
    mount = top_mount_at(mounts, driver_root)
    while mount is not None and not is_ours(mount) and len(found) < len(stack):
        found.append(mount)
        mount = stack.get(mount.parent_id)
    return found


def read_mounts(own_proc: Root) -> list[Mount] | None:
    """This process's own mounts (OWN_PROCFS_ROOT/self/mountinfo), not the host view's; None where the
    file does not exist, HostReadError where it cannot be read."""
    text = own_proc.read_text_or_none(MOUNTINFO, limit=MOUNTINFO_LIMIT)
    return None if text is None else parse_mountinfo(text)


def mount_argv() -> list[str]:
    """mount(8) onto its working directory, DRIVER_ROOT's descriptor, taken as given (``--no-canonicalize``:
    no realpath of it; driverroot/rootpath.py)."""
    return ["mount", "--no-canonicalize", "-t", "tmpfs", "-o", MOUNT_OPTIONS, MOUNT_SOURCE, "."]


def ensure_exec_mount(paths: HostPaths, runner: Runner, mounts: list[Mount] | None, unknown: str = "") -> bool:
    """Give DRIVER_ROOT an exec-capable mount of its own where statvfs says it needs one; True when one was
    made now.

    ``mounts``: this namespace's, once leftovers are gone (``rootdir.prepare_driver_root``), None where
    they could not be read (``unknown`` says why); runs before anything is written into DRIVER_ROOT.
    DRIVER_ROOT is opened as a real directory first (a link or a file is refused, driverroot/rootpath.py);
    its flags are that directory's and the tmpfs is mounted on it through the same descriptor.
    """
    fd = open_root(paths.driver_root, paths.run_dir)
    try:
        target = root_path(paths.driver_root, paths.run_dir)
        flags = root_flags_of(fd, target)
        decision = decide(flags, mounts, target)
        log.info("DRIVER_ROOT mount: %s", decision.reason)
        holder = decision.holder
        if holder is not None and decision.action != "keep" and blocking_options(holder) != flags.blocking:
            log.warning("the mount table shows %s; statvfs, which exec and mmap obey, decides", describe(holder))
        if decision.action != "mount":
            return False
        _check_propagation(decision, target, unknown)
        _log_hidden(fd, target)
        _mount_tmpfs(runner, descriptor_path(paths.own_procfs_root, fd, target), target, decision.reason)
    finally:
        os.close(fd)
    log.info(
        "mounted tmpfs %s at %s (%s): published files can be executed and mapped", MOUNT_SOURCE, target, MOUNT_OPTIONS
    )
    return True


def descriptor_path(own_procfs_root: Path, fd: int, shown: str) -> str:
    """OWN_PROCFS_ROOT/self/fd/``fd``, checked to name the directory ``fd`` is (mount(8) runs there)."""
    path = f"{own_procfs_root}/self/fd/{fd}"
    try:
        same = os.path.samestat(os.stat(path), os.fstat(fd))
    except OSError:
        same = False
    if not same:
        raise PublishError(
            f"{shown}: {path} does not name its descriptor: nothing is mounted",
            path=shown,
            fix="run the driver container with its own /proc at OWN_PROCFS_ROOT (default /proc)",
        )
    return path


def _check_propagation(decision: RootMountDecision, target: str, unknown: str) -> None:
    holder = decision.holder
    if holder is None:
        # Without the mount table, a tmpfs mounted here might stay in this container (a private RUN_DIR):
        # then the check before Ready would pass here and every consumer would still see the noexec one.
        raise PublishError(
            f"{decision.reason}, and whether a tmpfs mounted there would reach the host cannot be told: "
            f"{unknown or 'no mount in this mount table holds it'}",
            path=target,
            fix="run the driver container with its own /proc (OWN_PROCFS_ROOT, default /proc) readable, or set "
            "RUN_DIR to a filesystem mounted without noexec and nodev",
        )
    if not holder.shared:
        raise PublishError(
            f"{decision.reason}, and a tmpfs mounted there would stay in this container: {holder.mount_point} "
            f"is not a shared mount ({' '.join(holder.propagation) or 'private'})",
            path=holder.mount_point,
            fix="mount RUN_DIR (/run/nvidia) into the driver container with mountPropagation: Bidirectional "
            "(docker: -v /run/nvidia:/run/nvidia:rshared), as gpu-operator's driver DaemonSet does",
        )


def _mount_tmpfs(runner: Runner, cwd: str, target: str, reason: str) -> None:
    argv = mount_argv()
    try:
        done = runner.run(argv, check=False, cwd=cwd)
    except CommandError as exc:  # not found, timed out
        raise PublishError(f"{reason}; {exc.message}", path=target, fix=_mount_fix(exc.message)) from exc
    if done.returncode != 0:
        # util-linux puts the reason first ("mount: <dir>: permission denied.") and a dmesg hint last.
        detail = " ".join(line.strip() for line in done.stderr.strip().splitlines()[:2])
        raise PublishError(
            f"{reason}; mounting an exec-capable tmpfs at {target} failed: {' '.join(argv)} exited "
            f"{done.returncode}: {detail}",
            path=target,
            fix=_mount_fix(detail),
        )


def _log_hidden(fd: int, target: str) -> None:
    try:
        hidden = len(os.listdir(fd))
    except OSError:
        return
    if hidden:  # e.g. a root an older version published into the plain directory
        log.info(
            "%d entries of the directory %s stay below the new mount (hidden until the node reboots)", hidden, target
        )


def _mount_fix(message: str) -> str:
    # util-linux mount reports EPERM as "permission denied" (no CAP_SYS_ADMIN) or "only root can ...".
    lowered = message.lower()
    if "permission denied" in lowered or "only root" in lowered or "not permitted" in lowered:
        return (
            "give the driver container CAP_SYS_ADMIN: gpu-operator's driver DaemonSet runs it privileged "
            "(assets/state-driver/0500_daemonset.yaml, securityContext.privileged: true); standalone: "
            "docker run --cap-add SYS_ADMIN (or --privileged); or set RUN_DIR to a filesystem mounted "
            "without noexec and nodev"
        )
    return "see the mount error above; DRIVER_ROOT needs a mount that allows exec and device nodes"
