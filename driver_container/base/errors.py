"""The one exception hierarchy of the project (base/problems.py has ``Problem``, the one form of a non-fatal problem).
Library code raises these; only ``driver_container.cli`` turns them into messages and exit codes. A message
names the file (or command), the values found and the fix; the same facts are keyword-only fields (``path``,
``argv``, the versions...), ``details()`` gives those set. Only ``os`` is imported (the peermem probe's budget).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing stays unimported at run time (see above); type checkers read this as True
_PathLike = str | os.PathLike[str]


class DriverContainerError(Exception):
    """Base of every expected failure. ``fix`` is a one-line remedy shown to the operator."""

    exit_code = 1

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return self.message

    def details(self) -> dict[str, object]:
        """The structured fields of the subclass that are set (None and empty values left out)."""
        return {
            name: value
            for name, value in vars(self).items()
            if name not in ("message", "fix") and not name.startswith("_") and value is not None and value != ()
        }


class UsageError(DriverContainerError):
    """Bad command line or environment value: ``name`` (the option or environment variable), ``value``."""

    exit_code = 2

    def __init__(
        self, message: str, *, name: str | None = None, value: str | None = None, fix: str | None = None
    ) -> None:
        super().__init__(message, fix=fix)
        self.name, self.value = name, value


class PathError(DriverContainerError):
    """A failure about one file or directory: ``path`` (None where no single path is at fault)."""

    def __init__(self, message: str, *, path: _PathLike | None = None, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.path = None if path is None else os.fspath(path)


class HostReadError(PathError):
    """A host, procfs or sysfs file (``path``) cannot be read or is malformed (at ``line``, from 1)."""

    def __init__(
        self, message: str, *, path: _PathLike | None = None, line: int | None = None, fix: str | None = None
    ) -> None:
        super().__init__(message, path=path, fix=fix)
        self.line = line


class HostFileNotFound(HostReadError):
    """The file does not exist inside its root."""


class LdCacheFormatError(HostReadError):
    """An ld.so.cache file (``path``) is truncated or not in a format glibc writes."""


class SymlinkLoopError(HostReadError):
    """Too many symlinks while resolving a path (``path``) inside a root (ELOOP)."""


class ModuleFormatError(PathError):
    """A kernel module file (``path``) is not a readable module (bad ELF, compression, signature...)."""


class ModuleNotFoundInTreeError(DriverContainerError):
    """A module name could not be found in a module tree: ``module``, ``kernel`` (release), ``tree``."""

    def __init__(
        self,
        message: str,
        *,
        module: str | None = None,
        kernel: str | None = None,
        tree: _PathLike | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, fix=fix)
        self.module, self.kernel, self.tree = module, kernel, None if tree is None else os.fspath(tree)


class VerificationError(DriverContainerError):
    """Error-level findings stop the publish. ``codes``: the findings' codes; the versions at issue:
    ``loaded_version`` (running module), ``file_version`` (module file), ``userspace_version`` (the image's)."""

    def __init__(
        self,
        message: str,
        *,
        codes: tuple[str, ...] = (),
        loaded_version: str | None = None,
        file_version: str | None = None,
        userspace_version: str | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, fix=fix)
        self.codes = codes
        self.loaded_version, self.file_version, self.userspace_version = loaded_version, file_version, userspace_version


class UserspaceError(PathError):
    """The image's NVIDIA userspace (at ``path``) is missing, inconsistent or unsafe to publish."""


class ElfFormatError(UserspaceError):
    """A file (``path``) expected to be an ELF executable or shared object is not one, or is malformed."""


class DerError(ValueError):
    """Malformed DER (formats/kmod/der.py) at ``offset``. A ValueError: the signature decoder reports the
    signature as unparsable, it never reaches the CLI."""

    def __init__(self, message: str, *, offset: int | None = None) -> None:
        super().__init__(message)
        self.message, self.offset = message, offset


class PublishError(PathError):
    """Writing the driver root (at ``path``) failed; the previous root is left intact."""


class LockError(PathError):
    """Another instance holds the pid-file lock. ``path``: the pid file; ``holder``: its pid, when known."""

    def __init__(
        self, message: str, *, path: _PathLike | None = None, holder: int | None = None, fix: str | None = None
    ) -> None:
        super().__init__(message, path=path, fix=fix)
        self.holder = holder


class ModuleWaitTimeout(DriverContainerError):
    """Talos did not load the required modules in time: ``modules`` still missing after ``timeout`` s."""

    def __init__(
        self, message: str, *, modules: tuple[str, ...] = (), timeout: float | None = None, fix: str | None = None
    ) -> None:
        super().__init__(message, fix=fix)
        self.modules, self.timeout = modules, timeout


class CommandError(DriverContainerError):
    """An external command (``argv``) failed (``returncode``; None: no exit) or may not run (modprobe on Talos)."""

    def __init__(
        self, message: str, *, argv: tuple[str, ...] = (), returncode: int | None = None, fix: str | None = None
    ) -> None:
        super().__init__(message, fix=fix)
        self.argv, self.returncode = argv, returncode


class CommandTimeout(CommandError):
    """A command ran past its time and was killed with its process group (``returncode`` None)."""


class CommandStopped(CommandError):
    """A command killed because a termination signal arrived while it ran."""


class ForbiddenCommandError(CommandError):
    """A command that must never run on this platform was requested (``argv``: the refused command)."""


class DriverInUseError(CommandError):
    """The NVIDIA modules are still held ("driver in use by ..."); ``holders``: the modules holding them."""

    def __init__(
        self,
        message: str,
        *,
        holders: tuple[str, ...] = (),
        argv: tuple[str, ...] = (),
        returncode: int | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, argv=argv, returncode=returncode, fix=fix)
        self.holders = holders


class ModuleLoadError(CommandError):
    """modprobe/rmmod of an NVIDIA module failed, or the ``modules`` are not in the expected state after it."""

    def __init__(
        self,
        message: str,
        *,
        modules: tuple[str, ...] = (),
        argv: tuple[str, ...] = (),
        returncode: int | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, argv=argv, returncode=returncode, fix=fix)
        self.modules = modules


class KubernetesError(PathError):
    """The API refused or failed a request (``method``, ``resource``: API path or kind waited for, ``status``:
    None without an answer), or its configuration (``path``: kubeconfig or credential file) is unusable."""

    def __init__(
        self,
        message: str,
        *,
        method: str | None = None,
        resource: str | None = None,
        status: int | None = None,
        path: _PathLike | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, path=path, fix=fix)
        self.method, self.resource, self.status = method, resource, status


class ApiAnswerError(KubernetesError):
    """No usable answer to one API request (kube/transport.py); ``retry``: another attempt may get one."""

    def __init__(self, message: str, *, retry: bool, stopped: bool = False, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.retry, self.stopped = retry, stopped


class DaemonError(DriverContainerError):
    """A supervised ``daemon`` (nvidia-persistenced; ``pid``, ``returncode``) died; the pod must restart."""

    def __init__(
        self,
        message: str,
        *,
        daemon: str | None = None,
        pid: int | None = None,
        returncode: int | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, fix=fix)
        self.daemon, self.pid, self.returncode = daemon, pid, returncode


class FabricError(DaemonError):
    """Fabric Manager or NVLSM could not start, died, or the GPUs' fabric did not complete in time."""


class HostDriverPresentError(PathError):
    """The host provides the NVIDIA userspace (``path``: its nvidia-smi); the driver container must not run."""


class VerdictFormatError(DriverContainerError):
    """A document driver-manager hands to init in RUN_DIR (module-file verdict, pod context) does not parse
    (treated as absent); ``key``: the key at fault."""

    def __init__(self, message: str, *, key: str | None = None, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.key = key


class JsonFormatError(ValueError):
    """A JSON document too large, too deeply nested, not UTF-8, not JSON or not of the expected top-level
    type (formats/boundedjson.py). A ValueError: every reader treats it as damage, never the CLI."""
