"""What the driver-manager reads from the node before it decides anything (``gather_facts``)."""

from __future__ import annotations

import logging
import stat
from dataclasses import dataclass
from pathlib import PurePosixPath

from driver_container.errors import (
    HostReadError,
    VerificationError,
)
from driver_container.findings import loaded_version_of, versions_mismatch
from driver_container.formats.kernel.mountinfo import mounts_at_or_below, parse_mountinfo, top_mount_at
from driver_container.formats.kernel.nvidia_proc import NvidiaProcVersion
from driver_container.formats.numbers import parse_uint
from driver_container.inspect.hoststate import read_loaded_modules, read_nvidia_version
from driver_container.inspect.platform import PlatformKind, detect_platform
from driver_container.inspect.userspace import find_userspace
from driver_container.node.rootmount import is_ours
from driver_container.paths import HostPaths, Root
from driver_container.settings import Settings

log = logging.getLogger(__name__)


# The validator's host-driver probe: a regular executable nvidia-smi in these host directories
# (cmd/nvidia-validator, gpu-operator-contract.md section 5). In-root paths, resolved through Root.
HOST_SMI_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/opt/bin")


@dataclass(frozen=True)
class NodeFacts:
    platform: PlatformKind
    platform_evidence: str
    talos_version: str | None
    host_smi: PurePosixPath | None  # host nvidia-smi found by the validator's rule
    nvidia_version: str | None  # version of the loaded nvidia module; None when not loaded
    nvidia_loaded: bool
    image_version: str | None  # NVIDIA userspace version in this image
    state_digest: str | None  # RUN_DIR/nvidia-driver.state
    driver_mounts: tuple[str, ...]  # mount points at or below DRIVER_ROOT, unless ours is on top there
    pid_file_stale: bool  # pid file present and its process gone


def find_host_smi(host: Root) -> PurePosixPath | None:
    for directory in HOST_SMI_DIRS:
        inner = PurePosixPath(directory) / "nvidia-smi"
        st = host.stat(inner)  # follows links inside the host root, as chroot would
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
            return inner
    return None


def leftover_mounts(mountinfo: str, driver_root: str) -> tuple[str, ...]:
    """Mounts a previous driver container left at or below DRIVER_ROOT; none when the visible mount there
    is init's own exec-capable tmpfs (node/rootmount.py), which must outlive every container."""
    top = top_mount_at(parse_mountinfo(mountinfo), driver_root.rstrip("/") or "/")
    return () if top is not None and is_ours(top) else mounts_at_or_below(mountinfo, driver_root)


def _pid_file_stale(paths: HostPaths) -> bool:
    """True when a pid file is there and no live init holds it. init creates it as a regular file with
    O_NOFOLLOW (lock.py), so anything else at that name (a symlink, e.g. to /dev/zero, a FIFO) is no
    lock of ours: stale, and removed as a name. The read goes through Root: non-blocking, regular file,
    64 bytes at most."""
    name = paths.pid_file.name
    st = paths.run.lstat(name)
    if st is None:
        return False
    if not stat.S_ISREG(st.st_mode):
        log.warning("%s is not a regular file (mode %o): treated as stale", paths.pid_file, st.st_mode)
        return True
    try:
        text = paths.run.read_text(name, limit=64).strip()
    except HostReadError as exc:
        log.warning("%s", exc.message)
        return False
    # The driver pod runs with hostPID (0500_daemonset.yaml), so the pid is a host pid visible in /proc.
    pid = parse_uint(text)
    return not (pid is not None and paths.proc.is_dir(str(pid)))


def _proc_version(paths: HostPaths) -> NvidiaProcVersion | None:
    try:
        return read_nvidia_version(paths)
    except HostReadError as exc:  # sysfs' version is the fallback (loaded_version_of)
        log.debug("%s", exc.message)
        return None


def gather_facts(paths: HostPaths, settings: Settings) -> NodeFacts:
    platform = detect_platform(paths, settings.driver_platform)
    modules = read_loaded_modules(paths).modules
    loaded = modules["nvidia"].loaded
    # The loaded version as init's findings read it (findings.loaded_version_of), /proc first.
    nvidia_version = loaded_version_of(modules, _proc_version(paths)) if loaded else None
    mountinfo = paths.proc.read_text_or_none("self/mountinfo") or ""
    state = paths.run.read_text_or_none(paths.state_file.name)
    return NodeFacts(
        platform=platform.name,
        platform_evidence=platform.evidence,
        talos_version=platform.talos_version,
        host_smi=find_host_smi(paths.host),
        nvidia_version=nvidia_version,
        nvidia_loaded=loaded,
        image_version=find_userspace(paths).version if loaded else None,
        state_digest=state.strip() if state is not None else None,
        driver_mounts=leftover_mounts(mountinfo, str(paths.driver_root)),
        pid_file_stale=_pid_file_stale(paths),
    )


def check_versions(facts: NodeFacts) -> None:
    if not versions_mismatch(facts.nvidia_version, facts.image_version):
        return
    talos = facts.talos_version or "<Talos version>"
    raise VerificationError(
        f"the loaded nvidia module is version {facts.nvidia_version} but this image ships NVIDIA userspace "
        f"{facts.image_version}; they must be identical",
        codes=("VERSION_MISMATCH",),
        loaded_version=facts.nvidia_version,
        userspace_version=facts.image_version,
        fix=f"use the driver image {facts.nvidia_version}-talos{talos} (driver.version), or install the Talos "
        f"kmod extension of version {facts.image_version} and reboot (docs/talos.md)",
    )
