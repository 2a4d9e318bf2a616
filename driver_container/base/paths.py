"""The host description: every root the entrypoint reads or writes (``HostPaths``), with its production default.

No other module names an absolute host path. Access inside a root is base/resolver.py's ``Root``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from driver_container.base.records import NamedRecord
from driver_container.base.resolver import Root


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
    HostRootOption("SUPPORTED_GPUS_FILE", "supported_gpus_file", "NVIDIA's supported-gpus.json, inside USERSPACE_ROOT"),
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
    # Inside USERSPACE_ROOT: where NVIDIA's own driver container keeps the driver archive's list
    # (NVIDIA/gpu-driver-container gpu-driver-util/main.go DefaultSupportedGpusJsonPath @ 35a18d94bc97).
    supported_gpus_file: Path = Path("/usr/share/nvidia-driver-assistant/supported-gpus/supported-gpus.json")
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
    def from_env(cls, env: Mapping[str, str]) -> HostPaths:
        """From an environment mapping; this process's is read by settings/resolve.paths_of."""
        return cls.from_mapping(env)

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
    def integrity_file(self) -> Path:  # init's check of DRIVER_ROOT after Ready (driverroot/integrity.py)
        return self.run_dir / "nvidia-driver.verify.json"
