"""NVIDIA module files on the host, read with the modinfo engine (only when a command needs them).

Where they are (docs/talos.md, section 1, from siderolabs/extensions' file lists):
open modules in ``kernel/drivers/video/``, proprietary in
``extras/`` of ``/usr/lib/modules/<kver>`` (Talos >= 1.10, /usr-merged) or ``/lib/modules/<kver>``
(before 1.10); DKMS builds in ``updates/dkms``; anything modprobe can load is also in ``modules.dep``
(Ubuntu's precompiled ``kernel/nvidia-<ver>/``). File names use dashes, and the module's own name comes
from ``.modinfo``, never from the file name (Debian's ``nvidia-current.ko`` is named ``nvidia``).
"""

from __future__ import annotations

import logging
import re
from pathlib import PurePosixPath

from driver_container.base.errors import DriverContainerError
from driver_container.base.records import NamedRecord
from driver_container.base.resolver import Root
from driver_container.formats.kernel.nvidia_proc import ModuleFlavour

log = logging.getLogger(__name__)

MODULE_DIRS = ("/usr/lib/modules", "/lib/modules")
# depmod's default search order puts updates/ first (depmod.d(5)); then the Talos places.
SUBDIRS = ("updates/dkms", "updates", "extras", "kernel/drivers/video")
_FILE = re.compile(r"nvidia[A-Za-z0-9_-]*\.ko(?:\.(?:xz|zst|gz))?")
MAX_MODULE_SIZE = 512 << 20  # nvidia.ko with debug info is ~100 MiB; anything far larger is not a module
MODULES_DEP_LIMIT = 16 << 20


class ModuleFile(NamedRecord):
    path: PurePosixPath  # inside the host root
    name: str
    version: str | None = None
    srcversion: str | None = None
    vermagic: str | None = None
    license: str | None = None
    firmware: tuple[str, ...] = ()
    parameters: tuple[str, ...] = ()
    signer: str | None = None
    error: str | None = None  # set when the file could not be read as a module
    machine: int | None = None  # ELF e_machine: the architecture the file was built for
    # None: unknown; decided by read_module_files, see license_flavour.
    flavour: ModuleFlavour | None = None


# Which files' MODULE_LICENSE tells the flavour. Only nvidia.ko and nvidia-modeset.ko differ between the
# two builds: "NVIDIA" in the proprietary package, "Dual MIT/GPL" in open-gpu-kernel-modules
# (kernel-open/nvidia/nv.c, kernel-open/nvidia-modeset/nvidia-modeset-linux.c). nvidia-uvm and
# nvidia-drm are "Dual MIT/GPL" in BOTH (the proprietary package ships their sources under that
# license too), nvidia-peermem is "Dual BSD/GPL" in both: their flavour is that of the nvidia.ko built
# with them (same directory, same version), never their own license.
_LICENSE_FLAVOURS: dict[str, ModuleFlavour] = {"NVIDIA": "proprietary", "Dual MIT/GPL": "open"}
_LICENSE_DECIDES = ("nvidia", "nvidia_modeset")


def license_flavour(name: str, license_text: str | None) -> ModuleFlavour | None:
    """The flavour a module's own license proves, or None when its license is the same in both builds."""
    if name not in _LICENSE_DECIDES or license_text is None:
        return None
    return _LICENSE_FLAVOURS.get(license_text)


def with_companion_flavours(files: dict[str, ModuleFile]) -> dict[str, ModuleFile]:
    """Set each file's flavour: its own license where that decides, else that of the nvidia.ko of the
    same build (same directory and version); unknown otherwise."""
    core = files.get("nvidia")
    core_flavour = license_flavour("nvidia", core.license) if core is not None else None
    result: dict[str, ModuleFile] = {}
    for name, module in files.items():
        flavour = license_flavour(name, module.license)
        if flavour is None and core is not None and core_flavour is not None and module.error is None:
            same_build = module.path.parent == core.path.parent and module.version == core.version
            flavour = core_flavour if same_build else None
        result[name] = module._replace(flavour=flavour)
    return result


def name_from_file(file_name: str) -> str:
    return file_name.split(".ko", 1)[0].replace("-", "_")


def _module_bases(host: Root, kernel_release: str) -> list[str]:
    """Existing module trees for the release; /lib/modules is skipped when it is the same directory
    (Talos >= 1.10 and every /usr-merged distribution link /lib -> usr/lib)."""
    bases: list[str] = []
    seen = set()
    for top in MODULE_DIRS:
        inner = f"{top}/{kernel_release}"
        real = host.resolve(inner)
        if real in seen or not host.is_dir(inner):
            continue
        seen.add(real)
        bases.append(inner)
    return bases


def _from_modules_dep(host: Root, base: str) -> list[PurePosixPath]:
    text = host.read_text_or_none(f"{base}/modules.dep", limit=MODULES_DEP_LIMIT) or ""
    found = []
    for line in text.splitlines():
        target = line.partition(":")[0].strip()
        if _FILE.fullmatch(PurePosixPath(target).name):
            path = PurePosixPath(target) if target.startswith("/") else PurePosixPath(base) / target
            found.append(path)
    return found


def find_module_files(host: Root, kernel_release: str) -> list[PurePosixPath]:
    """In-root paths of nvidia*.ko* files for the release, in modprobe's order of preference.
    Cheap: names only, nothing is opened except modules.dep."""
    ordered: list[PurePosixPath] = []
    for base in _module_bases(host, kernel_release):
        ordered.extend(_from_modules_dep(host, base))
        for sub in SUBDIRS:
            for path in host.walk_files(f"{base}/{sub}") if host.is_dir(f"{base}/{sub}") else ():
                if _FILE.fullmatch(path.name):
                    ordered.append(path)
    return [p for p in dict.fromkeys(ordered) if host.is_file(p)]


def read_module_file(host: Root, path: PurePosixPath) -> ModuleFile:
    """Read one file with the modinfo engine; failures become ``ModuleFile.error``, never exceptions."""
    # Lazy, hot path: kmod pulls in pyelftools and zstandard; `status` without module files skips them.
    from driver_container.readers.kmod import read_module

    fallback = name_from_file(path.name)
    try:
        info = read_module(host.resolve(path), max_size=MAX_MODULE_SIZE)
    except DriverContainerError as exc:
        return ModuleFile(path=path, name=fallback, error=exc.message)
    except OSError as exc:
        return ModuleFile(path=path, name=fallback, error=f"{host.path}{path}: {exc.strerror}")
    signature = info.signature
    return ModuleFile(
        path=path,
        name=info.name or fallback,
        version=info.version,
        srcversion=info.srcversion,
        vermagic=info.vermagic,
        license=info.license,
        firmware=tuple(fw for fw in info.firmware if fw),  # build.sh writes an empty one for "none"
        parameters=tuple(info.parameters),
        signer=getattr(signature, "signer", None) if signature is not None else None,
        machine=info.machine,
    )


def read_module_files(host: Root, kernel_release: str) -> dict[str, ModuleFile]:
    """{module name: the file modprobe would pick}; the other candidates of a name are skipped.
    HostReadError where the module tree cannot be listed; a file that does not read as a module is a
    ``ModuleFile`` with ``error`` set."""
    result: dict[str, ModuleFile] = {}
    for path in find_module_files(host, kernel_release):
        module = read_module_file(host, path)
        result.setdefault(module.name, module)
    return with_companion_flavours(result)
