"""modinfo of the NVIDIA module files on the host, as kmod prints it, through the project's own reader
(formats/kmod): the files modprobe would consider for the running kernel (inspect/modfiles.py).

In gpu-operator's pod the driver container has no /host, so there are none: driver-manager's reading of
them is RUN_DIR's module-verdict file, which the report copies (hostfacts.RUN_FILES)."""

from __future__ import annotations

from driver_container.base.errors import DriverContainerError
from driver_container.base.paths import HostPaths
from driver_container.formats.kmod import format_modinfo
from driver_container.inspect.modfiles import MAX_MODULE_SIZE, find_module_files
from driver_container.inspect.platform import read_kernel_release
from driver_container.readers.kmod import read_module

MAX_MODULE_FILES = 16  # five modules, each found at most in kernel/ and extras/ (or updates/)


def modinfo_text(paths: HostPaths) -> bytes:
    """Each file's ``modinfo`` text under a ``== path ==`` line; a file that does not read says why."""
    release = read_kernel_release(paths.proc)
    if release is None:
        return b"# the running kernel's release is unknown (/proc/sys/kernel/osrelease): no module files looked up\n"
    files = find_module_files(paths.host, release)
    out = [f"# {len(files)} NVIDIA module files for {release} under {paths.host_root}\n".encode()]
    for path in files[:MAX_MODULE_FILES]:
        out.append(f"== {path} ==\n".encode())
        try:
            out.append(format_modinfo(read_module(paths.host.resolve(path), max_size=MAX_MODULE_SIZE)))
        except (DriverContainerError, OSError) as exc:
            out.append(f"# not read: {getattr(exc, 'message', None) or exc}\n".encode())
    if len(files) > MAX_MODULE_FILES:
        out.append(f"# {len(files) - MAX_MODULE_FILES} more files left out\n".encode())
    return b"".join(out)
