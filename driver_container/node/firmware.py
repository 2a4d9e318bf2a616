"""The kernel's custom firmware search path, so open modules find GSP firmware in the driver root.

The kernel's firmware loader tries ``firmware_class.path`` before /lib/firmware/updates/<uname -r>,
/lib/firmware/updates, /lib/firmware/<uname -r> and /lib/firmware (drivers/base/firmware_loader/main.c).
Talos' kmod extensions ship no GSP firmware and /usr is read-only, so the only way for the kernel to see
DRIVER_ROOT/lib/firmware/nvidia/<v>/gsp_*.bin is this parameter, written with the HOST's path of the
driver root. It must be set before the GPU is first opened (GSP boots on first open). Best effort:
in SELinux-enforcing Talos /sys/module is read-only (EROFS/EACCES), and an operator may have set another
path; every warning names the persistent fix, the kernel argument ``firmware_class.path=``.
"""

from __future__ import annotations

import enum
import errno
import logging
import os
from pathlib import Path

from driver_container.base.beneath import open_beneath
from driver_container.base.errors import HostReadError
from driver_container.base.records import NamedRecord
from driver_container.base.resolver import Root
from driver_container.formats.kernel.sysfs import FIRMWARE_PATH_PARAM

log = logging.getLogger(__name__)

# fw_path_para is a 256-byte buffer (module_param_string, firmware_loader/main.c): longer is refused.
MAX_PATH_LEN = 255


class FirmwarePathResult(enum.Enum):
    SET = "set"  # we wrote our path
    ALREADY = "already"  # it already held our path
    OTHER = "other"  # it holds another path: left alone
    READ_ONLY = "read-only"  # not writable (SELinux enforcing, ro mount)
    MISSING = "missing"  # no firmware_class parameter (not mounted, or loader built without it)
    TOO_LONG = "too-long"


class FirmwarePathReport(NamedRecord):
    result: FirmwarePathResult
    wanted: str
    found: str | None


def kernel_argument_fix(wanted: str) -> str:
    """The persistent fix: the firmware loader is built in (CONFIG_FW_LOADER=y in siderolabs/pkgs
    kernel/build/config-amd64, f541ca434ee63964319bb912e370f0ed407f8a18), so its path is a kernel argument.
    On Talos that goes into the boot assets: machine.install.extraKernelArgs is deprecated and hidden since
    v1.12.0, refused next to grubUseUKICmdline (set by generated configs since 1.12), ignored with SDBoot, and
    1.14 configs have no install section (siderolabs/talos v1alpha1_types.go, v1alpha1_validation.go,
    generate/worker.go at v1.14.0-rc.1 7a84d74)."""
    return (
        f"boot with the kernel argument firmware_class.path={wanted} (Talos: the Image Factory schematic's "
        "customization.extraKernelArgs, or imager --extra-kernel-arg, then upgrade the node to that installer)"
    )


def _write_failure_cause(exc: OSError) -> str:
    """Why the sysfs write failed, in words a node operator can act on."""
    if exc.errno == errno.EROFS:
        # Talos with SELinux enforcing gives pods a read-only /sys/module; a non-privileged pod has ro /sys.
        return "read-only file system (EROFS: SELinux enforcing on Talos, or /sys mounted read-only)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied ({errno.errorcode[exc.errno]}: SELinux enforcing, or the pod is not privileged)"
    return f"cannot write: {exc.strerror}"


def wanted_firmware_path(host_driver_root: Path) -> str:
    """The host path of DRIVER_ROOT/lib/firmware (HOST_DRIVER_ROOT, default DRIVER_ROOT)."""
    return str(host_driver_root / "lib/firmware")


def set_firmware_search_path(host_driver_root: Path, sysfs: Root) -> FirmwarePathReport:
    """Point the kernel's firmware search path (in SYSFS_ROOT, ``sysfs``) at HOST_DRIVER_ROOT/lib/firmware
    where it is empty; anything else is left alone and said."""
    wanted = wanted_firmware_path(host_driver_root)
    param_file = sysfs.path / FIRMWARE_PATH_PARAM
    try:
        current_text = sysfs.read_text_or_none(FIRMWARE_PATH_PARAM)
    except HostReadError as exc:
        log.warning("%s; firmware search path not set", exc.message)
        return FirmwarePathReport(FirmwarePathResult.READ_ONLY, wanted, None)
    if current_text is None:
        log.warning(
            "%s: missing; cannot point the kernel at %s (GSP firmware) (fix: %s)",
            param_file,
            wanted,
            kernel_argument_fix(wanted),
        )
        return FirmwarePathReport(FirmwarePathResult.MISSING, wanted, None)
    current = current_text.strip("\n")
    if current == wanted:
        log.info("firmware search path already %s", wanted)
        return FirmwarePathReport(FirmwarePathResult.ALREADY, wanted, current)
    if current:
        log.warning(
            "%s holds %r, not %s: left alone; GSP firmware must then be found there or in /lib/firmware "
            "(fix: clear it or set it to %s)",
            param_file,
            current,
            wanted,
            wanted,
        )
        return FirmwarePathReport(FirmwarePathResult.OTHER, wanted, current)
    if len(wanted.encode()) > MAX_PATH_LEN:
        log.warning("%s: %s is longer than the kernel's %d bytes; not set", param_file, wanted, MAX_PATH_LEN)
        return FirmwarePathReport(FirmwarePathResult.TOO_LONG, wanted, current)
    return _write(sysfs, param_file.as_posix(), wanted)


def _write(sysfs: Root, param_file: str, wanted: str) -> FirmwarePathReport:
    # A sysfs attribute cannot be replaced by rename (fsutil's atomic write): it is written in place,
    # in one write(2), as NVIDIA's script does with `echo -n`. The kernel stores it whole or refuses it.
    # Resolved chroot-like, then opened from SYSFS_ROOT with no link at any component (base/beneath.py): a
    # directory swapped for a link in between is refused (ELOOP), never followed out of the sysfs root.
    try:
        parts = sysfs.resolve_parts(FIRMWARE_PATH_PARAM)
    except HostReadError as exc:  # changed since it was read (a link now, a loop)
        log.warning("%s; firmware search path not set", exc.message)
        return FirmwarePathReport(FirmwarePathResult.READ_ONLY, wanted, "")
    try:
        fd = open_beneath(sysfs.path, "/".join(parts), os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(fd, wanted.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning(
            "%s: not writable, %s; firmware search path not set: the kernel does not see the GSP firmware in %s "
            "unless the host provides it (fix: %s)",
            param_file,
            _write_failure_cause(exc),
            wanted,
            kernel_argument_fix(wanted),
        )
        return FirmwarePathReport(FirmwarePathResult.READ_ONLY, wanted, "")
    log.info("firmware search path set to %s (%s)", wanted, param_file)
    return FirmwarePathReport(FirmwarePathResult.SET, wanted, "")
