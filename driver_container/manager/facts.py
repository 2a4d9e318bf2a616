"""What the driver-manager knows of the node before it decides anything (``gather_facts``): the inspect
layer's ``HostState`` and the few things only the manager reads."""

from __future__ import annotations

import logging
import stat
from dataclasses import dataclass
from pathlib import PurePosixPath

from driver_container.base.errors import HostReadError
from driver_container.base.paths import HostPaths
from driver_container.base.resolver import Root
from driver_container.driverroot.mount import is_ours
from driver_container.findings import loaded_version, version_fix, versions_mismatch
from driver_container.formats.kernel.mountinfo import mounts_at_or_below, parse_mountinfo, top_mount_at
from driver_container.formats.numbers import parse_uint
from driver_container.inspect.hoststate import HostState, inspect_host
from driver_container.inspect.platform import PlatformKind
from driver_container.settings import Settings

log = logging.getLogger(__name__)


# The validator's host-driver probe: a regular executable nvidia-smi in these host directories
# (NVIDIA/gpu-operator cmd/nvidia-validator/main.go @ 10ee5b36). In-root paths, resolved through Root.
HOST_SMI_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/opt/bin")


@dataclass(frozen=True)
class NodeFacts:
    """What driver-manager decides on: the host as the inspect layer reads it for ``init`` and ``status``
    (``inspect_host``: platform, modules, versions, module files; one reader per host fact), plus what
    only the manager reads (a host nvidia-smi, RUN_DIR's leftovers)."""

    host: HostState
    host_smi: PurePosixPath | None  # host nvidia-smi found by the validator's rule
    state_digest: str | None  # RUN_DIR/nvidia-driver.state
    driver_mounts: tuple[str, ...]  # mount points at or below DRIVER_ROOT, unless ours is on top there
    pid_file_stale: bool  # pid file present and its process gone

    @property
    def platform(self) -> PlatformKind:
        return self.host.platform.name

    @property
    def platform_evidence(self) -> str:
        return self.host.platform.evidence

    @property
    def talos_version(self) -> str | None:
        return self.host.platform.talos_version

    @property
    def nvidia_loaded(self) -> bool:
        return self.host.modules["nvidia"].loaded

    @property
    def nvidia_version(self) -> str | None:
        """The loaded nvidia module's version as init's findings read it (/proc first); None unloaded."""
        return loaded_version(self.host) if self.nvidia_loaded else None

    @property
    def image_version(self) -> str | None:
        """The image's NVIDIA userspace version, where a loaded module is there to compare it with."""
        return self.host.userspace.version if self.nvidia_loaded else None


def find_host_smi(host: Root) -> PurePosixPath | None:
    for directory in HOST_SMI_DIRS:
        inner = PurePosixPath(directory) / "nvidia-smi"
        st = host.stat(inner)  # follows links inside the host root, as chroot would
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
            return inner
    return None


def leftover_mounts(mountinfo: str, driver_root: str) -> tuple[str, ...]:
    """Mounts a previous driver container left at or below DRIVER_ROOT; none when the visible mount there
    is init's own exec-capable tmpfs (driverroot/mount.py), which must outlive every container."""
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


def gather_facts(paths: HostPaths, settings: Settings) -> NodeFacts:
    """One inspection of the host (``inspect_host``, as ``status`` makes it) and the manager's own reads."""
    mountinfo = paths.proc.read_text_or_none("self/mountinfo") or ""
    state = paths.run.read_text_or_none(paths.state_file.name)
    return NodeFacts(
        host=inspect_host(paths, settings),
        host_smi=find_host_smi(paths.host),
        state_digest=state.strip() if state is not None else None,
        driver_mounts=leftover_mounts(mountinfo, str(paths.driver_root)),
        pid_file_stale=_pid_file_stale(paths),
    )


def version_note(facts: NodeFacts) -> str | None:
    """The loaded module against this manager image's own userspace: a note, never a refusal. The manager
    is version-agnostic like NVIDIA's (k8s-driver-manager reads no driver version); the driver image is
    what must match the module, and ``init`` refuses it when it does not (VERSION_MISMATCH). So a
    ``driver.manager.version`` that lags ``driver.version`` during an upgrade is fine; the note says how
    to pin both together."""
    if not versions_mismatch(facts.nvidia_version, facts.image_version):
        return None
    return (
        f"loaded nvidia {facts.nvidia_version}, this manager image ships {facts.image_version}: not a problem for "
        f"the manager (init checks the driver image); to keep them together: "
        + version_fix(facts.nvidia_version or "", facts.image_version or "", facts.host.platform)
    )
