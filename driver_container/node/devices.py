"""Device nodes in DRIVER_ROOT/dev, which gpu-operator's validator uses as its device root.

The list follows what ``nvidia-ctk system create-device-nodes`` creates (nvidia-container-toolkit):
``nvidiactl`` 195:255 and ``nvidia-modeset`` 195:254 on the major of ``nvidia`` (``nvidia-frontend``
before ~550), ``nvidia-uvm``/``nvidia-uvm-tools`` minors 0/1 on the dynamic ``nvidia-uvm`` major,
``nvidiaN`` with N = "Device Minor" of each GPU, and ``nvidia-caps/nvidia-capN`` from the MIG minors on
the ``nvidia-caps`` major. Mode 0666, as NVIDIA's udev-less setup (nvidia-modprobe) uses, except for the
capability nodes: opening one IS the capability, so each gets the mode the resource manager registered it
with, read from its ``/proc/driver/nvidia/capabilities`` file where the capability exists, else the mode
it will be registered with (NVIDIA/open-gpu-kernel-modules src/nvidia/arch/nvalloc/unix/src/os.c
@df1c9a3de: ``config`` OS_RUSR 0400, ``monitor`` and every GI/CI ``access`` OS_RUGO 0444). Every minor
mig-minors lists gets its node at start, so a GPU or compute instance the MIG manager creates later finds
its node: nothing here runs again after a MIG reconfiguration.

``null`` (1:3, the kernel's Documentation/admin-guide/devices.txt) is made only when the root has a
shell (``ROOT_SHELL``): the only consumer that runs a program chrooted in the root and needs it is NVIDIA's
DRA driver's MPS control daemon, and ``nvidia-cuda-mps-control -d`` exits 1 when it cannot open
/dev/null as it daemonizes (seen with strace on 535.309.01; tests/integration/test_mps_real.py).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from pathlib import Path, PurePosixPath

from driver_container.base.errors import HostReadError, PublishError
from driver_container.base.records import NamedRecord
from driver_container.base.resolver import Root
from driver_container.driverroot.procsys import has_shell
from driver_container.formats.kernel.devices import (
    MigMinor,
    capability_proc_path,
    parse_capability_file,
    parse_mig_minors,
    parse_proc_devices,
)
from driver_container.readers.nvidia_proc import read_gpus
from driver_container.runtime.fsutil import check_relative, lstat_at, open_dir

log = logging.getLogger(__name__)

NODE_MODE = 0o666
CTL_MINOR = 255  # NV_CONTROL_DEVICE_MINOR (kernel-open/common/inc/nv.h)
MODESET_MINOR = 254  # NV_MODESET_MINOR_DEVICE_NUM (nvidia-modeset)
NVIDIA_MAJOR_NAMES = ("nvidia", "nvidia-frontend", "nvidiactl")  # frontend: drivers before ~550
CAP_CONFIG_MODE = 0o400  # OS_RUSR (os.c, module docstring): root alone may reconfigure MIG
CAP_MODE = 0o444  # OS_RUGO: monitor and the GI/CI access capabilities
CAPABILITIES = "driver/nvidia/capabilities"
MEM_MAJOR, NULL_MINOR = 1, 3  # /dev/null (devices.txt)
NODE_ATTEMPTS = 3  # a node replaced while being made this often: another writer is at work, refuse


class DeviceNode(NamedRecord):
    name: str  # relative to DRIVER_ROOT/dev, e.g. "nvidia0" or "nvidia-caps/nvidia-cap1"
    major: int
    minor: int
    mode: int = NODE_MODE


class NodeReport(NamedRecord):
    created: tuple[str, ...]
    unchanged: tuple[str, ...]
    not_permitted: tuple[str, ...]


def plan_device_nodes(proc: Root) -> tuple[DeviceNode, ...]:
    """The nodes the loaded driver provides, read from PROCFS_ROOT (``proc``; no writes)."""
    text = proc.read_text_or_none("devices")
    if text is None:
        where = proc.path / "devices"
        raise HostReadError(
            f"{where}: missing; cannot learn the NVIDIA device majors",
            path=where,
            fix="mount the host's /proc at PROCFS_ROOT",
        )
    devices = parse_proc_devices(text)
    nodes: list[DeviceNode] = []
    nvidia = next((m for m in map(devices.major, NVIDIA_MAJOR_NAMES) if m is not None), None)
    if nvidia is None:
        log.warning("%s: no nvidia major registered; no control or GPU nodes", proc.path / "devices")
    else:
        nodes += [DeviceNode("nvidiactl", nvidia, CTL_MINOR), DeviceNode("nvidia-modeset", nvidia, MODESET_MINOR)]
        nodes += [DeviceNode(f"nvidia{minor}", nvidia, minor) for minor in _gpu_minors(proc)]
    uvm = devices.major("nvidia-uvm")
    if uvm is not None:
        nodes += [DeviceNode("nvidia-uvm", uvm, 0), DeviceNode("nvidia-uvm-tools", uvm, 1)]
    caps = devices.major("nvidia-caps")
    mig_text = proc.read_text_or_none("driver/nvidia-caps/mig-minors")
    if caps is not None and mig_text is not None:
        registered = frozenset(proc.listdir(CAPABILITIES))  # "mig", "gpu0", ...: skip absent GPUs' reads
        modes = {entry.minor: _cap_mode(proc, entry, registered) for entry in parse_mig_minors(mig_text)}
        nodes += [DeviceNode(f"nvidia-caps/nvidia-cap{m}", caps, m, modes[m]) for m in sorted(modes)]
    return tuple(nodes)


def chroot_nodes(driver_root: Path) -> tuple[DeviceNode, ...]:
    """``null`` when the published root has its shell (a regular file, no link followed), else none."""
    return (DeviceNode("null", MEM_MAJOR, NULL_MINOR),) if has_shell(driver_root) else ()


def _cap_mode(proc: Root, entry: MigMinor, registered: frozenset[str]) -> int:
    """The registered capability's mode, or the one it will be registered with."""
    default = CAP_CONFIG_MODE if entry.capability == "config" else CAP_MODE
    relative = capability_proc_path(entry.capability)
    if relative.partition("/")[0] not in registered:
        return default
    where = f"{CAPABILITIES}/{relative}"
    text = proc.read_text_or_none(where)
    if text is None:
        return default
    found = parse_capability_file(text)
    if found is None or found.minor != entry.minor:
        log.warning(
            "%s: unreadable or names another minor than mig-minors' %d; mode %o",
            proc.path / where,
            entry.minor,
            default,
        )
        return default
    return found.mode


def _gpu_minors(proc: Root) -> list[int]:
    minors: set[int] = set()
    found = read_gpus(proc)
    for gpu in found.gpus:
        if gpu.device_minor is None:
            log.warning("GPU %s: no Device Minor in its information file; no node for it", gpu.pci_id)
            continue
        minors.add(gpu.device_minor)
    for problem in found.problems:
        log.warning("%s", problem)
    return sorted(minors)


def create_device_nodes(driver_root: Path, nodes: tuple[DeviceNode, ...]) -> NodeReport:
    """Create each node under DRIVER_ROOT/dev; an identical existing node is left alone."""
    created: list[str] = []
    unchanged: list[str] = []
    refused: list[str] = []
    dirs: dict[PurePosixPath, int] = {}
    try:
        for node in nodes:
            rel = check_relative(PurePosixPath("dev", node.name), what="device node")
            if rel.parent not in dirs:  # reached without following a link (fsutil.open_dir)
                dirs[rel.parent] = open_dir(driver_root, rel.parent, create=True)
            shown = driver_root / rel
            if _matches(dirs[rel.parent], rel.name, node, shown):
                unchanged.append(node.name)
            elif _make_node(dirs[rel.parent], rel.name, node, shown):
                created.append(node.name)
            else:
                refused.append(node.name)
    finally:
        for fd in dirs.values():
            os.close(fd)
    if refused:
        log.warning(
            "mknod not permitted (no CAP_MKNOD?): device nodes not created in %s: %s",
            driver_root / "dev",
            ", ".join(refused),
        )
    return NodeReport(tuple(created), tuple(unchanged), tuple(refused))


def _is_node(st: os.stat_result | None, node: DeviceNode) -> bool:
    return st is not None and stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(node.major, node.minor)


def _matches(dir_fd: int, name: str, node: DeviceNode, shown: Path) -> bool:
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise PublishError(f"{shown}: cannot stat: {exc.strerror}", path=shown) from exc
    return _is_node(st, node) and stat.S_IMODE(st.st_mode) == node.mode


def _make_node(dir_fd: int, name: str, node: DeviceNode, shown: Path) -> bool:
    """True once installed, False when mknod is not permitted; a node replaced meanwhile is made again."""
    for _ in range(NODE_ATTEMPTS):
        made = _try_make_node(dir_fd, name, node, shown)
        if made is not None:
            return made
        log.warning("%s: replaced by another process while being created; creating it again", shown)
    raise PublishError(
        f"{shown}: replaced by another process while being created, {NODE_ATTEMPTS} times",
        path=shown,
        fix="stop the other process that writes into the driver root's dev directory",
    )


def _try_make_node(dir_fd: int, name: str, node: DeviceNode, shown: Path) -> bool | None:
    """mknodat at a temporary name, its mode set, renameat over the target: readers see old or new.

    Every step goes through ``dir_fd`` and none follows a link, so another process that can write this
    directory (a pod with the root mounted read-write) cannot point it outside: the chmod is glibc's
    fchmodat(AT_SYMLINK_NOFOLLOW) (a link is refused, never followed; Python raises ValueError), and what
    was made is then checked through an O_PATH descriptor of it (O_PATH opens no device), and after the
    rename the target's inode. Anything else found at the temporary or the target name is removed (None:
    made again). Not umask(0) around mknod: the umask is the whole process's.
    """
    tmp = f".{name}.tmp"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)  # a leftover of a killed start (unlink never follows a link)
        os.mknod(tmp, stat.S_IFCHR | node.mode, os.makedev(node.major, node.minor), dir_fd=dir_fd)
        fd = os.open(tmp, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            return False
        if exc.errno in (errno.EEXIST, errno.ENOENT):  # another process took the temporary name
            return None
        raise PublishError(f"{shown}: cannot create device node: {exc.strerror}", path=shown) from exc
    try:
        made = os.fstat(fd)
        if _is_node(made, node) and stat.S_IMODE(made.st_mode) != node.mode:
            os.chmod(tmp, node.mode, dir_fd=dir_fd, follow_symlinks=False)
            made = os.fstat(fd)
        if not _is_node(made, node) or stat.S_IMODE(made.st_mode) != node.mode:
            _discard(dir_fd, tmp)
            return None
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        placed = lstat_at(dir_fd, name)
        if placed is not None and (placed.st_ino, placed.st_dev) == (made.st_ino, made.st_dev):
            return True
        if not _is_node(placed, node):  # what the rename moved in was swapped in: not left at the name
            _discard(dir_fd, name)
        return None
    except (ValueError, NotImplementedError):  # a link at the temporary name: refused, not followed
        _discard(dir_fd, tmp)
        return None
    except OSError as exc:
        _discard(dir_fd, tmp)
        raise PublishError(f"{shown}: cannot install device node: {exc.strerror}", path=shown) from exc
    finally:
        os.close(fd)


def _discard(dir_fd: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)
