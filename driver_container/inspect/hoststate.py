"""Gather everything the entrypoint knows about the host into one ``HostState`` (reading only).

``read_loaded_modules`` is the cheap part that ``init`` polls every second while Talos loads the modules
(a few small procfs/sysfs files, no module file, no pyelftools); ``inspect_host`` adds module files,
the image's userspace, requested parameters and firmware. Checking is ``findings.check``'s, rendering
``cli/status_render``'s: read -> check -> plan -> apply stays literal in the callers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from driver_container.base.errors import HostReadError
from driver_container.base.paths import HostPaths
from driver_container.base.problems import Problem, noted
from driver_container.base.records import NamedRecord
from driver_container.base.resolver import Root
from driver_container.driverroot.state import RootState, read_root_state
from driver_container.formats.gpu_support import GpuSupport, gpu_support
from driver_container.formats.kernel.modules import (
    ProcModule,
    parse_proc_modules,
)
from driver_container.formats.kernel.nvidia_proc import (
    GpuInfo,
    GpuList,
    NvidiaProcVersion,
    parse_nvidia_params,
    parse_nvidia_version,
)
from driver_container.formats.kernel.pci import PciFunction
from driver_container.formats.kernel.sysfs import SysfsModule
from driver_container.formats.modconf import conf_module_name, parse_module_conf
from driver_container.inspect.firmware import locate_firmware
from driver_container.inspect.modfiles import read_module_files
from driver_container.inspect.pcigpus import read_pci_gpus
from driver_container.inspect.platform import PlatformInfo, detect_platform
from driver_container.inspect.supportedgpus import read_listed_gpus
from driver_container.inspect.sysfs import read_sysfs_module
from driver_container.inspect.userspace import UserspaceVersion, find_userspace
from driver_container.readers.nvidia_proc import nvswitch_proc_present, read_gpus
from driver_container.settings import Settings

if TYPE_CHECKING:
    from driver_container.inspect.modfiles import ModuleFile
    from driver_container.inspect.podcontext import PodContext
    from driver_container.readers.fabric import FabricInfo

log = logging.getLogger(__name__)

NVIDIA_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")
# Modules the operator's validator waits for when GDS / GDRCopy is on (findings/operator.py): only whether
# they are loaded is read.
COMPANION_MODULES = ("nvidia_fs", "gdrdrv")
NVREG = "NVreg_"  # /proc/driver/nvidia/params drops this prefix of the modinfo parameter names


class LoadedModule(NamedRecord):
    name: str
    loaded: bool
    builtin: bool
    version: str | None
    srcversion: str | None
    refcnt: int | None
    holders: tuple[str, ...]
    taint: str | None
    parameters: dict[str, str]
    state: str | None = None  # Live | Loading | Unloading (procfs) or live | coming | going (sysfs)
    users: tuple[str, ...] = ()  # /proc/modules' users column, kept: holders/ in sysfs may list fewer


def _merge(name: str, proc: ProcModule | None, sysfs: SysfsModule, params: dict[str, str]) -> LoadedModule:
    loaded = proc is not None or sysfs.initstate is not None or sysfs.builtin
    return LoadedModule(
        name=name,
        loaded=loaded,
        builtin=proc is None and sysfs.builtin,
        version=sysfs.version,
        srcversion=sysfs.srcversion,
        refcnt=sysfs.refcnt if sysfs.refcnt is not None else (proc.refcnt if proc else None),
        holders=sysfs.holders or (proc.users if proc else ()),
        taint=sysfs.taint if sysfs.taint is not None else (proc.taint if proc else None),
        parameters=params,
        state=sysfs.initstate or (proc.state if proc else None),
        users=proc.users if proc else (),
    )


def read_nvidia_params(paths: HostPaths) -> dict[str, str]:
    """Effective NVreg_* values, keyed by their modinfo names (``NVreg_`` added back); HostReadError."""
    text = paths.proc.read_text_or_none("driver/nvidia/params", limit=1 << 20)
    return {NVREG + k: v for k, v in parse_nvidia_params(text or "").items()}


class LoadedModules(NamedRecord):
    modules: dict[str, LoadedModule]  # every name of NVIDIA_MODULES
    problems: tuple[Problem, ...] = ()  # unreadable or malformed /proc/modules, /sys/module files
    companions: frozenset[str] = frozenset()  # COMPANION_MODULES in /proc/modules (the validator's rule)


def read_loaded_modules(paths: HostPaths) -> LoadedModules:
    """Loaded state of every NVIDIA module from /proc/modules and /sys/module (cheap; polled by init)."""
    problems: list[Problem] = []
    proc: dict[str, ProcModule] = {}
    text = noted(problems, lambda: paths.proc.read_text_or_none("modules", limit=4 << 20), None)
    if text is not None:  # absent on kernels without module support; sysfs initstate decides then
        rejects: list[str] = []
        proc = {m.name: m for m in parse_proc_modules(text, rejects=rejects)}
        where = f"{paths.proc.path}/modules"
        problems.extend(Problem(where, f"unexpected line {line!r}") for line in rejects[:5])
    result: dict[str, LoadedModule] = {}
    for name in NVIDIA_MODULES:
        sysfs = read_sysfs_module(paths.sys, name)
        problems.extend(sysfs.problems)
        params = sysfs.parameters
        if name == "nvidia" and (name in proc or sysfs.present):
            params = {**params, **noted(problems, lambda: read_nvidia_params(paths), {})}
        result[name] = _merge(name, proc.get(name), sysfs, params)
    # The validator looks for nvidia_fs and gdrdrv in lsmod, i.e. /proc/modules: the same list here.
    return LoadedModules(result, tuple(problems), frozenset(COMPANION_MODULES).intersection(proc))


class HostState(NamedRecord):
    platform: PlatformInfo
    settings: Settings
    modules: dict[str, LoadedModule]
    nvidia_version: NvidiaProcVersion | None
    gpus: tuple[GpuInfo, ...]  # bound by the loaded module (/proc/driver/nvidia/gpus)
    module_files: dict[str, ModuleFile]
    userspace: UserspaceVersion
    requested_params: dict[str, tuple[tuple[str, str], ...]]  # module -> ((NAME, VALUE), ...)
    firmware: dict[str, str | None]  # firmware name -> where it was found (None: nowhere)
    root: RootState  # DRIVER_ROOT: its publish, mounts, flags (driverroot/state.py)
    problems: tuple[Problem, ...] = ()  # unreadable or malformed host files
    param_errors: tuple[Problem, ...] = ()  # unreadable or malformed /drivers/*.conf
    fabric: FabricInfo | None = None  # NVSwitch / NVLink5 systems only (docs/fabric.md)
    module_files_source: str = "host"  # host | driver-manager verdict <file> | none (verdict.py)
    pci_gpus: tuple[PciFunction, ...] = ()  # every NVIDIA GPU on the PCI bus, bound or not (pcigpus.py)
    # What the image's supported-gpus.json says of those GPUs' ids (None: no usable list; supportedgpus.py)
    listed_gpus: dict[int, GpuSupport] | None = None
    companions_loaded: frozenset[str] = frozenset()  # nvidia_fs / gdrdrv loaded (findings/operator.py)
    firmware_search_path: str | None = None  # the kernel's firmware_class.path (None: unreadable or absent)
    firmware_kernel_sees: frozenset[str] = frozenset()  # firmware names in the kernel's own search
    pod_context: PodContext | None = None  # what driver-manager learned of this pod (podcontext.py)

    @property
    def kernel_release(self) -> str | None:
        return self.platform.kernel_release

    def support_of(self, device: int) -> GpuSupport | None:
        """What the image's supported-gpus.json says of the GPU id ``device``, else the table; None where
        neither knows it."""
        listed = self.listed_gpus
        return listed[device] if listed is not None and device in listed else gpu_support(device)


def read_nvidia_version(paths: HostPaths) -> NvidiaProcVersion | None:
    """/proc/driver/nvidia/version of the loaded module (None where the file is absent); HostReadError."""
    text = paths.proc.read_text_or_none("driver/nvidia/version", limit=65536)
    try:
        return None if text is None else parse_nvidia_version(text)
    except HostReadError as exc:  # the parser knows only the text: name the file
        where = f"{paths.proc.path}/driver/nvidia/version"
        raise HostReadError(f"{where}: {exc.message}", path=where, fix=exc.fix) from exc


class RequestedParams(NamedRecord):
    params: dict[str, tuple[tuple[str, str], ...]]  # module -> ((NAME, VALUE), ...)
    problems: tuple[Problem, ...] = ()  # unreadable or malformed /drivers/<module>.conf


def read_requested_params(paths: HostPaths) -> RequestedParams:
    """The operator's ``/drivers/<module>.conf`` files (kernelModuleConfig ConfigMap keys)."""
    conf = Root(paths.drivers_conf_dir)
    result: dict[str, tuple[tuple[str, str], ...]] = {}
    problems: list[Problem] = []
    try:
        names = conf.listdir("/")
    except HostReadError as exc:
        return RequestedParams(result, (Problem.of(exc),))
    for file_name in names:
        module = conf_module_name(file_name.removesuffix(".conf"))
        if not file_name.endswith(".conf") or module not in NVIDIA_MODULES:
            continue
        try:
            text = conf.read_text_or_none(file_name, limit=65536) or ""
            result[module] = tuple(parse_module_conf(text, source=str(paths.drivers_conf_dir / file_name)))
        except HostReadError as exc:
            problems.append(Problem.of(exc))
    return RequestedParams(result, tuple(problems))


def _fabric(paths: HostPaths) -> FabricInfo | None:
    if not nvswitch_proc_present(paths.proc):  # one stat on ordinary nodes
        return None
    from driver_container.readers.fabric import inspect_fabric  # lazy, hot path: NVSwitch/NVLink5 nodes only

    return inspect_fabric(paths)


def _pod_context(paths: HostPaths, settings: Settings) -> PodContext | None:
    """driver-manager's pod context for this pod and boot (podcontext.py); None outside a pod or without one."""
    if settings.pod_name is None:
        return None
    from driver_container.inspect.podcontext import load_context  # lazy, hot path: in a pod only

    return load_context(paths, settings.pod_name)


def inspect_host(
    paths: HostPaths, settings: Settings, platform: PlatformInfo | None = None, loaded: LoadedModules | None = None
) -> HostState:
    """Read the whole host picture (no checks: callers run ``findings.check`` on it), module files included.
    ``platform``, ``loaded``: the caller's detection and module read, where it made them (once per process).
    The proof that the published root is usable runs nothing here: ``status`` adds it (lifecycle/status.py)."""
    platform = platform or detect_platform(paths, settings.driver_platform)
    loaded = loaded or read_loaded_modules(paths)
    problems: list[Problem] = [*platform.problems, *loaded.problems]
    modules, nvidia_loaded = loaded.modules, loaded.modules["nvidia"].loaded
    version = noted(problems, lambda: read_nvidia_version(paths), None) if nvidia_loaded else None
    gpus, pci = read_gpus(paths.proc) if nvidia_loaded else GpuList(()), read_pci_gpus(paths)
    problems.extend(gpus.problems + pci.problems)
    listed = read_listed_gpus(paths, pci.gpus)  # nothing read on a node without NVIDIA GPUs
    problems.extend(listed.problems)
    kver = platform.kernel_release
    files: dict[str, ModuleFile] = noted(problems, lambda: read_module_files(paths.host, kver), {}) if kver else {}
    requested = read_requested_params(paths)
    userspace = find_userspace(paths.userspace)
    files_source = "host"
    if not files and kver:  # no host root here (the operator's main container): driver-manager's verdict
        from driver_container.inspect.verdict import adopt_verdict  # lazy, hot path: only without a host root

        files, files_source = adopt_verdict(paths, settings.driver_config_digest, userspace.version, kver)
    firmware_names = sorted({fw for f in files.values() for fw in f.firmware})
    problems.extend(userspace.problems)
    fabric = _fabric(paths)
    problems.extend(fabric.problems if fabric else ())
    root = read_root_state(paths.driver_root, paths.run_dir, paths.own_proc)  # our own mountinfo, read once
    problems.extend(root.problems)
    firmware = locate_firmware(paths, firmware_names, kver)
    problems.extend(firmware.problems)
    return HostState(
        platform=platform,
        settings=settings,
        modules=modules,
        nvidia_version=version,
        gpus=gpus.gpus,
        module_files=files,
        userspace=userspace,
        requested_params=requested.params,
        firmware=firmware.where,
        root=root,
        pci_gpus=pci.gpus,
        listed_gpus=listed.listed,
        companions_loaded=loaded.companions,
        firmware_search_path=firmware.search_path,
        firmware_kernel_sees=firmware.kernel_sees,
        problems=tuple(dict.fromkeys(problems)),
        param_errors=requested.problems,
        fabric=fabric,
        module_files_source=files_source,
        pod_context=_pod_context(paths, settings),
    )
