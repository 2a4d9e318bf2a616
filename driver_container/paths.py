"""The host description: every root the entrypoint reads or writes, and chroot-like access inside them.

No other module names an absolute host path. A ``Root`` resolves symlinks as the kernel would after
``chroot(root)`` (absolute targets restart at the root, ``..`` stops there, over 40 links is a loop: Linux
``MAXSYMLINKS``, fs/namei.c), then opens the result from the root with no link at any component
(beneath.py). So nothing outside a root is read, whatever the links in a hostile tree say or become.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath

from driver_container.errors import HostFileNotFound, HostReadError, SymlinkLoopError
from driver_container.fileread import READ_FLAGS, converted, open_below, read_up_to, refuse_irregular, refuse_larger
from driver_container.records import NamedRecord

MAX_SYMLINKS = 40  # Linux MAXSYMLINKS: ELOOP after 40 links in one lookup (fs/namei.c)
DEFAULT_READ_LIMIT = 1 << 20  # kernel text files and os-release are far below 1 MiB
LINK_APPEARED = "a symlink appeared in it while it was read"  # ELOOP below a root: the paths were link-free


def _split(inner: str | PurePosixPath) -> list[str]:
    return [p for p in str(inner).split("/") if p not in ("", ".")]


class Root(NamedRecord):
    """A directory seen as ``/`` by the code that reads below it (a NamedRecord: records.py says why)."""

    path: Path
    # lstat answers remembered for the lifetime of this object (see ``snapshot``): None = not remembered.
    lstat_memo: dict[str, tuple[int, str] | None] | None = None

    def snapshot(self) -> Root:
        """The same root, remembering every lstat: one pass over a tree (a publish resolves ~170 paths)."""
        return Root(self.path, {})

    def _kind(self, candidate: str) -> tuple[int, str] | None:
        """(st_mode, link target or "") of ``candidate``; None when it does not exist."""
        if self.lstat_memo is not None and candidate in self.lstat_memo:
            return self.lstat_memo[candidate]
        try:
            mode = os.lstat(candidate).st_mode
            found = (mode, os.readlink(candidate) if stat.S_ISLNK(mode) else "")
        except (FileNotFoundError, NotADirectoryError):
            found = None
        except OSError as exc:
            raise HostReadError(f"{candidate}: {exc.strerror}", path=candidate) from exc
        if self.lstat_memo is not None:
            self.lstat_memo[candidate] = found
        return found

    def resolve(self, inner: str | PurePosixPath, *, follow_last: bool = True) -> Path:
        """Resolve ``inner`` below the root as chroot would; missing tails are kept verbatim."""
        parts = self.resolve_parts(inner, follow_last=follow_last)
        return self.path.joinpath(*parts)

    def resolve_parts(self, inner: str | PurePosixPath, *, follow_last: bool = True) -> list[str]:
        """``resolve``'s answer as components below the root: no link among them (a missing tail aside)."""
        # Strings, not pathlib, on purpose: this runs for every published file and every poll.
        base = os.fspath(self.path).rstrip("/") or ""
        pending = deque(_split(inner))
        done: list[str] = []
        links = 0
        while pending:
            name = pending.popleft()
            if name == "..":
                if done:
                    done.pop()
                continue
            kind = self._kind("/".join((base, *done, name)))
            if kind is None:
                return [*done, name, *pending]
            if not stat.S_ISLNK(kind[0]) or (not pending and not follow_last):
                done.append(name)
                continue
            links += 1
            if links > MAX_SYMLINKS:
                where = self.path / str(inner).lstrip("/")
                fix = "remove the symlink loop from the tree"
                raise SymlinkLoopError(f"{where}: too many levels of symbolic links", path=where, fix=fix)
            target = kind[1]
            if target.startswith("/"):
                done = []
            pending.extendleft(reversed(_split(target)))
        return done

    def inner_path(self, real: Path) -> PurePosixPath:
        """The in-root absolute path of a real path below the root."""
        return PurePosixPath("/") / real.relative_to(self.path)

    def open_resolved(self, inner: str | PurePosixPath, flags: int) -> tuple[int, Path]:
        """(fd, real path) of ``inner`` resolved, then opened with no link at any component (beneath.py)."""
        parts = self.resolve_parts(inner)
        real = self.path.joinpath(*parts)
        # ENOTDIR is "no such file" too: a file where a directory is, as _kind says.
        with converted(real, verb="cannot open", missing=HostFileNotFound, loop=LINK_APPEARED):
            return open_below(self.path, "/".join(parts), flags), real

    def read_bytes(self, inner: str | PurePosixPath, *, limit: int = DEFAULT_READ_LIMIT) -> bytes:
        fd, real = self.open_resolved(inner, READ_FLAGS)
        refuse_irregular(fd, real, fix="check what is mounted or linked at this path")
        try:
            with converted(real):
                data = read_up_to(fd, limit + 1)
        finally:
            os.close(fd)
        return refuse_larger(data, limit, real, fix="check that it is the right file")

    def read_text(self, inner: str | PurePosixPath, *, limit: int = DEFAULT_READ_LIMIT) -> str:
        return self.read_bytes(inner, limit=limit).decode("utf-8", errors="replace")

    def read_text_or_none(self, inner: str | PurePosixPath, *, limit: int = DEFAULT_READ_LIMIT) -> str | None:
        try:
            return self.read_text(inner, limit=limit)
        except HostFileNotFound:
            return None

    def listdir(self, inner: str | PurePosixPath) -> list[str]:
        """Sorted entry names of a directory; empty when it does not exist."""
        try:
            fd, _real = self.open_resolved(inner, os.O_RDONLY | os.O_DIRECTORY)
        except HostFileNotFound:
            return []
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def lstat(self, inner: str | PurePosixPath) -> os.stat_result | None:
        try:
            return os.lstat(self.resolve(inner, follow_last=False))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def stat(self, inner: str | PurePosixPath) -> os.stat_result | None:
        try:
            return os.stat(self.resolve(inner), follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def is_dir(self, inner: str | PurePosixPath) -> bool:
        st = self.stat(inner)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def is_file(self, inner: str | PurePosixPath) -> bool:
        st = self.stat(inner)
        return st is not None and stat.S_ISREG(st.st_mode)

    def exists(self, inner: str | PurePosixPath) -> bool:
        return self.stat(inner) is not None

    def walk_files(self, inner: str | PurePosixPath) -> Iterator[PurePosixPath]:
        """In-root paths of regular files and links below ``inner``, without following directory links."""
        top = self.resolve(inner)
        for dirpath, _dirs, files in os.walk(top):
            for name in sorted(files):
                yield self.inner_path(Path(dirpath) / name)


class HostRootOption(NamedRecord):
    """One host root: its environment variable (the CLI option is ``--<env lowercased, dashed>``), the
    ``HostPaths`` field it sets and the option's help. Adding a root: a field and a row here."""

    env: str
    field: str
    help: str


# The one table of host roots (docs/configuration.md): HostPaths.from_mapping, env names, CLI options.
HOST_ROOTS: tuple[HostRootOption, ...] = (
    HostRootOption("HOST_ROOT_MOUNT", "host_root", "the host's / as mounted here (default /host)"),
    # As gpu-operator sets it (transformForHostRoot, 10ee5b36): hostPaths.rootFS; the volume stays at /host.
    HostRootOption("HOST_ROOT", "host_rootfs", "the host's / as the host names it (default /)"),
    HostRootOption("PROCFS_ROOT", "procfs_root", "the host's view (default /proc)"),
    HostRootOption("OWN_PROCFS_ROOT", "own_procfs_root", "this process's own /proc, for its mounts (default /proc)"),
    HostRootOption("SYSFS_ROOT", "sysfs_root", "(default /sys)"),
    HostRootOption("RUN_DIR", "run_dir", "(default /run/nvidia)"),
    HostRootOption("DRIVER_ROOT", "driver_root_override", "published root (default RUN_DIR/driver)"),
    HostRootOption("HOST_DRIVER_ROOT", "host_driver_root_override", "DRIVER_ROOT as the host sees it"),
    HostRootOption("USERSPACE_ROOT", "userspace_root", "image root holding the NVIDIA userspace (/)"),
    HostRootOption("HOST_OS_RELEASE", "host_os_release_override", "(/host-etc/os-release, else <host>/etc/...)"),
    HostRootOption("DRIVERS_CONF_DIR", "drivers_conf_dir", "module parameter files (default /drivers)"),
    HostRootOption("FABRICMANAGER_RUN_DIR", "fabric_run_dir", "FM pid files, sockets (/run/nvidia-fabricmanager)"),
    HostRootOption("FABRICMANAGER_LOG_DIR", "fabric_log_dir", "FM and NVLSM logs (default /var/log)"),
    HostRootOption("KMSG_PATH", "kmsg_path", "the kernel's log device, read by bug-report (default /dev/kmsg)"),
)
ENV_NAMES: tuple[str, ...] = tuple(r.env for r in HOST_ROOTS)

# The operator mounts the host's /etc/os-release here (assets/state-driver/0500_daemonset.yaml).
OPERATOR_OS_RELEASE = Path("/host-etc/os-release")


class HostPaths(NamedRecord):
    """Where everything is. Defaults are the production layout inside the driver pod."""

    host_root: Path = Path("/host")  # where the operator mounts the host root (volume host-root)
    host_rootfs: Path = Path("/")  # the host's own path of it (HOST_ROOT): named in messages only
    procfs_root: Path = Path("/proc")
    own_procfs_root: Path = Path("/proc")
    sysfs_root: Path = Path("/sys")
    run_dir: Path = Path("/run/nvidia")
    driver_root_override: Path | None = None
    host_driver_root_override: Path | None = None
    userspace_root: Path = Path("/")
    host_os_release_override: Path | None = None
    drivers_conf_dir: Path = Path("/drivers")
    # gpu-operator mounts the host's /run/nvidia-fabricmanager here (assets/state-driver/0500_daemonset.yaml,
    # a22dbf6): Fabric Manager's pid files and its fixed FM<->NVLSM socket live there (docs/fabric.md).
    fabric_run_dir: Path = Path("/run/nvidia-fabricmanager")
    fabric_log_dir: Path = Path("/var/log")  # the operator mounts the host's /var/log (same DaemonSet)
    kmsg_path: Path = Path("/dev/kmsg")  # the driver pod is privileged: the host's /dev (bug-report only)

    @classmethod
    def from_mapping(cls, values: Mapping[str, str | Path | None]) -> HostPaths:
        """Build from ``HOST_ROOTS`` environment names (environment or CLI options); empty means default."""
        kwargs: dict[str, Path] = {}
        for root in HOST_ROOTS:
            value = values.get(root.env)
            if value is not None and str(value) != "":
                kwargs[root.field] = Path(value)
        return cls(**kwargs)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HostPaths:
        return cls.from_mapping(os.environ if env is None else env)

    @property
    def driver_root(self) -> Path:
        """Where the published driver root is written (container path)."""
        return self.driver_root_override or self.run_dir / "driver"

    @property
    def host_driver_root(self) -> Path:
        """The same directory as the host sees it (for the firmware search path)."""
        return self.host_driver_root_override or self.driver_root

    @property
    def host_os_release(self) -> Path:
        if self.host_os_release_override is not None:
            return self.host_os_release_override
        if OPERATOR_OS_RELEASE.exists():
            return OPERATOR_OS_RELEASE
        return self.host_root / "etc/os-release"

    @property
    def host(self) -> Root:
        return Root(self.host_root)

    @property
    def proc(self) -> Root:
        return Root(self.procfs_root)

    @property
    def own_proc(self) -> Root:
        return Root(self.own_procfs_root)

    @property
    def sys(self) -> Root:
        return Root(self.sysfs_root)

    @property
    def userspace(self) -> Root:
        return Root(self.userspace_root)

    @property
    def run(self) -> Root:
        return Root(self.run_dir)

    @property
    def fabric_run(self) -> Root:
        return Root(self.fabric_run_dir)

    @property
    def validations_dir(self) -> Path:
        return self.run_dir / "validations"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "nvidia-driver.pid"

    @property
    def state_file(self) -> Path:
        return self.run_dir / "nvidia-driver.state"

    @property
    def verify_file(self) -> Path:  # init's check of DRIVER_ROOT after Ready (driverroot/integrity.py)
        return self.run_dir / "nvidia-driver.verify.json"
