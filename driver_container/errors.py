"""The one exception hierarchy of the project.

Library code raises these; only ``driver_container.cli`` turns them into messages and exit codes.
Every message names the file (or command), the values found and, where one exists, the fix.
"""

from __future__ import annotations


class DriverContainerError(Exception):
    """Base of every expected failure. ``fix`` is a one-line remedy shown to the operator."""

    exit_code = 1

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return self.message


class UsageError(DriverContainerError):
    """Bad command line or environment value."""

    exit_code = 2


class HostReadError(DriverContainerError):
    """A host, procfs or sysfs file could not be read or is malformed."""


class HostFileNotFound(HostReadError):
    """The file does not exist inside its root."""


class LdCacheFormatError(HostReadError):
    """An ld.so.cache file is truncated or not in a format glibc writes."""


class SymlinkLoopError(HostReadError):
    """Too many symlinks while resolving a path inside a root (ELOOP)."""


class ModuleFormatError(DriverContainerError):
    """A kernel module file is not a readable module (bad ELF, compression, signature...)."""


class ModuleNotFoundInTreeError(DriverContainerError):
    """A module name could not be found in a module tree."""


class VerificationError(DriverContainerError):
    """Error-level findings stop the driver from being published."""


class UserspaceError(DriverContainerError):
    """The image's NVIDIA userspace is missing, inconsistent or unsafe to publish."""


class ElfFormatError(UserspaceError):
    """A file expected to be an ELF executable or shared object is not one, or is malformed."""


class DerError(ValueError):
    """Malformed DER (formats/kmod/der.py). A ValueError, not a DriverContainerError: the signature
    decoder catches it and reports the module's signature as unparsable, it never reaches the CLI."""


class PublishError(DriverContainerError):
    """Writing the driver root failed; the previous root is left intact."""


class LockError(DriverContainerError):
    """Another instance holds the pid-file lock."""


class ModuleWaitTimeout(DriverContainerError):
    """Talos did not load the required modules in time."""


class CommandError(DriverContainerError):
    """An external command failed or may not be run (e.g. modprobe on Talos)."""


class ForbiddenCommandError(CommandError):
    """A command that must never run on this platform was requested."""


class DriverInUseError(CommandError):
    """The NVIDIA modules cannot be unloaded: something still holds them ("driver in use by ...")."""


class ModuleLoadError(CommandError):
    """modprobe/rmmod of an NVIDIA module failed, or the modules are not in the expected state after it."""


class KubernetesError(DriverContainerError):
    """The Kubernetes API refused or failed a request."""


class DaemonError(DriverContainerError):
    """A daemon the entrypoint supervises (nvidia-persistenced) died; the pod must restart."""


class FabricError(DaemonError):
    """Fabric Manager or NVLSM could not start, died, or the GPUs' fabric did not complete in time."""


class HostDriverPresentError(DriverContainerError):
    """The host already provides the NVIDIA userspace; the driver container must not run on this node."""


class VerdictFormatError(DriverContainerError):
    """The module-file verdict in RUN_DIR does not parse; it is then treated as absent."""
