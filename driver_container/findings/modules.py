"""Cross-checks of a ``HostState``: pure, state in, findings out. Codes are stable (docs/troubleshooting.md).

Why the version checks are errors: nvidia-container-cli mounts only libraries whose file name ends with
the loaded module's version, and NVML refuses a kernel module of another version ("Driver/library version
mismatch"), so every GPU pod would fail later; refusing here names the cause once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from driver_container.findings.gpus import extension_hint
from driver_container.findings.model import (
    Finding,
    talos_module_snippet,
)
from driver_container.findings.pod import mismatch_fix
from driver_container.findings.userspace import userspace_absent
from driver_container.formats.elfarch import machine_name, normalise_arch

if TYPE_CHECKING:
    from driver_container.formats.kernel.nvidia_proc import NvidiaProcVersion
    from driver_container.inspect.hoststate import HostState, LoadedModule
    from driver_container.inspect.modfiles import ModuleFile
    from driver_container.inspect.platform import PlatformInfo


def load_fix(state: HostState, module: str) -> str:
    if state.platform.name == "talos":
        return (
            f"install the NVIDIA kmod system extension ({extension_hint(state)}) "
            f"and list {module} in the machine config; "
            + talos_module_snippet(module, [], state.platform.talos_version)
        )
    return f"load it on the host (modprobe {module.replace('_', '-')}) or run `nvidia-driver load`"


def _peermem(state: HostState) -> list[Finding]:
    """Generic hosts: init loads nvidia_peermem itself (modprobe/generic.py). Talos: findings/operator.py."""
    if not state.settings.gpu_direct_rdma or state.modules["nvidia_peermem"].loaded or state.platform.name == "talos":
        return []
    message = "GPU_DIRECT_RDMA_ENABLED=true but nvidia_peermem is not loaded"
    return [Finding("warning", "PEERMEM_NOT_LOADED", message, load_fix(state, "nvidia_peermem"))]


def module_presence(state: HostState) -> list[Finding]:
    out: list[Finding] = []
    mods = state.modules
    if not mods["nvidia"].loaded:
        out.append(
            Finding("error", "NVIDIA_NOT_LOADED", "the nvidia kernel module is not loaded", load_fix(state, "nvidia"))
        )
    if not mods["nvidia_uvm"].loaded:
        out.append(
            Finding(
                "error",
                "UVM_NOT_LOADED",
                "nvidia_uvm is not loaded: CUDA and the operator's validator need its device major in /proc/devices",
                load_fix(state, "nvidia_uvm"),
            )
        )
    if state.settings.nvidia_modeset and not mods["nvidia_modeset"].loaded:
        out.append(
            Finding(
                "warning",
                "MODESET_NOT_LOADED",
                "nvidia_modeset is not loaded",
                load_fix(state, "nvidia_modeset") + " (or set NVIDIA_MODESET=false)",
            )
        )
    out += _peermem(state)
    for m in mods.values():
        if m.builtin:
            out.append(
                Finding(
                    "info",
                    "BUILTIN_MODULE",
                    f"{m.name} is built into the kernel (no initstate in /sys/module/{m.name})",
                    "nothing to do; it cannot be unloaded or reloaded with other parameters",
                )
            )
        elif m.loaded and m.state not in (None, "Live", "live"):
            out.append(
                Finding(
                    "warning",
                    "MODULE_NOT_LIVE",
                    f"{m.name} is {m.state}, not live",
                    "wait for the kernel to finish loading or unloading it, then run status again",
                )
            )
    return out


def loaded_version_of(modules: Mapping[str, LoadedModule], proc_version: NvidiaProcVersion | None) -> str | None:
    """The loaded nvidia module's version: /proc/driver/nvidia/version (the running module's own words),
    else /sys/module/nvidia/version. driver-manager's facts use it too, so both compare the same number."""
    if proc_version is not None:
        return proc_version.version
    return modules["nvidia"].version


def loaded_version(state: HostState) -> str | None:
    return loaded_version_of(state.modules, state.nvidia_version)


def versions_mismatch(loaded: str | None, userspace: str | None) -> bool:
    """The one version rule (``status``, ``init`` and driver-manager): a loaded module and an image
    userspace, both known, must be identical (see the package doc for why)."""
    return bool(loaded and userspace and loaded != userspace)


def version_fix(loaded: str, userspace: str, platform: PlatformInfo) -> str:
    """What to set when the loaded module is ``loaded`` and an image ships ``userspace``: the two image
    settings pinned together (the operator appends ``-<OS tag>`` to the driver's tag, never to the
    manager's: NVIDIA/gpu-operator 10ee5b36 controllers/object_controls.go ``resolveDriverTag``), with the
    tag the node's pod pulls where its os-release gives the OS tag. Without the pod context the setting in
    force is unknown, so only the loaded version is named (an image of another version cannot have it set);
    with one, ``findings/pod.py`` names the side that differs."""
    os_tag = platform.operator_os_tag
    tag = f"{loaded}-{os_tag}" if os_tag else f"{loaded}-<os tag>"
    return (
        f"set driver.version={loaded} and driver.manager.version={loaded} (NVIDIADriver: spec.version and "
        f"spec.manager.version; the driver pod then pulls {tag}), or pin both to one digest; or make "
        f"the host load {userspace} modules (on Talos: the kmod extension of that version) and reboot"
    )


def versions(state: HostState) -> list[Finding]:
    out: list[Finding] = []
    us, loaded, wanted = state.userspace, loaded_version(state), state.settings.driver_version
    if us.version is None:
        out.append(userspace_absent(us))
    elif len(us.versions_seen) > 1:
        out.append(
            Finding(
                "warning",
                "USERSPACE_AMBIGUOUS",
                f"several userspace versions under {us.root}: {', '.join(us.versions_seen)}; using {us.version}",
                "keep one driver version in the image",
            )
        )
    if wanted and us.version and us.version != wanted:
        out.append(
            Finding(
                "error",
                "USERSPACE_VERSION_MISMATCH",
                f"the image's userspace is {us.version} ({us.libcuda or us.libnvidia_ml}) but DRIVER_VERSION={wanted}",
                "use the image built for DRIVER_VERSION, or correct DRIVER_VERSION",
            )
        )
    nvidia = state.modules["nvidia"]
    if nvidia.loaded and loaded is None:
        out.append(
            Finding(
                "warning",
                "LOADED_VERSION_UNKNOWN",
                "nvidia is loaded but neither /proc/driver/nvidia/version "
                "nor /sys/module/nvidia/version gives its version",
                "check that PROCFS_ROOT/SYSFS_ROOT are the host's",
            )
        )
    if versions_mismatch(loaded, us.version):
        out.append(
            Finding(
                "error",
                "VERSION_MISMATCH",
                f"the loaded kernel module is {loaded} but the image's userspace is {us.version}: "
                "GPU pods would fail with 'Driver/library version mismatch'",
                version_fix(loaded or "", us.version or "", state.platform)
                if state.pod_context is None
                else mismatch_fix(state, state.pod_context, loaded or "", us.version or ""),
            )
        )
    for m in state.modules.values():
        if m.name != "nvidia" and m.loaded and m.version and loaded and m.version != loaded:
            out.append(
                Finding(
                    "error",
                    "MODULE_VERSIONS_DIFFER",
                    f"{m.name} is {m.version} but nvidia is {loaded}",
                    "load all NVIDIA modules from one driver release (reboot after fixing the host's modules)",
                )
            )
    return out


def file_checks(state: HostState, m: LoadedModule, f: ModuleFile | None) -> list[Finding]:
    if f is None:
        if m.loaded and not m.builtin and state.kernel_release:
            return [
                Finding(
                    "info",
                    "MODULE_FILE_MISSING",
                    f"no file for loaded {m.name} under HOST_ROOT_MOUNT/{{usr/,}}lib/modules/{state.kernel_release}",
                    "mount the host root at HOST_ROOT_MOUNT to verify the module files (optional)",
                )
            ]
        return []
    if f.error:
        return [Finding("warning", "MODULE_FILE_UNREADABLE", f"{f.path}: {f.error}", "check the host's module file")]
    out: list[Finding] = []
    kver = state.kernel_release
    if f.vermagic is not None and kver and f.vermagic.split(" ", 1)[0] != kver:
        out.append(
            Finding(
                "error",
                "VERMAGIC_MISMATCH",
                f"{f.path}: vermagic {f.vermagic.strip()!r} does not start with the running kernel release {kver}",
                "install the NVIDIA modules built for the running kernel "
                "(on Talos: the kmod extension of the same Talos release)",
            )
        )
    if m.loaded and not m.builtin:
        diffs = [
            f"{what} {theirs} on disk vs {ours} loaded"
            for what, ours, theirs in (("version", m.version, f.version), ("srcversion", m.srcversion, f.srcversion))
            if ours and theirs and ours != theirs
        ]
        if diffs:
            out.append(
                Finding(
                    "error",
                    "MODULE_FILE_MISMATCH",
                    f"{m.name}: the loaded module is not {f.path}: " + "; ".join(diffs),
                    "reboot the node so the kernel loads the installed modules",
                )
            )
    return out


def flavour(state: HostState) -> list[Finding]:
    wanted = state.settings.kernel_module_type
    if wanted == "auto":
        return []
    f = state.module_files.get("nvidia")
    found, source = None, ""
    if state.nvidia_version is not None:
        found, source = state.nvidia_version.flavour, "/proc/driver/nvidia/version"
    elif f is not None and f.flavour:
        found, source = f.flavour, f"license {f.license!r} of {f.path}"
    if found is None or found == wanted:
        return []
    fix = (
        (
            "install the nvidia-open-gpu-kernel-modules extension"
            if wanted == "open"
            else "install the nonfree-kmod-nvidia extension"
        )
        if state.platform.name == "talos"
        else f"install the {wanted} modules"
    )
    return [
        Finding(
            "warning",
            "FLAVOUR_MISMATCH",
            f"KERNEL_MODULE_TYPE={wanted} but the nvidia module is {found} ({source})",
            f"{fix}, or set KERNEL_MODULE_TYPE={found} (driver.kernelModuleType in the ClusterPolicy)",
        )
    ]


def _node_arch(state: HostState) -> tuple[str | None, str]:
    """The node's architecture: the ELF machine of its nvidia module files, else the arch NVIDIA's
    loaded module prints in /proc/driver/nvidia/version."""
    files = [state.module_files[n] for n in ("nvidia", *sorted(state.module_files)) if n in state.module_files]
    for file in files:
        if file.machine is not None:
            return machine_name(file.machine), str(file.path)
    if state.nvidia_version is not None and state.nvidia_version.arch:
        return normalise_arch(state.nvidia_version.arch), "/proc/driver/nvidia/version"
    return None, ""


def architecture(state: HostState) -> list[Finding]:
    """A userspace of another architecture cannot open the GPU at all (every binary fails with
    "Exec format error" in the GPU pods), so it is an error before anything is published."""
    userspace = machine_name(state.userspace.machine)
    node, source = _node_arch(state)
    if userspace is None or node is None or userspace == node:
        return []
    lib = state.userspace.libcuda or state.userspace.libnvidia_ml
    return [
        Finding(
            "error",
            "ARCH_MISMATCH",
            f"the image's NVIDIA userspace is {userspace} ({lib}) but the node is {node} ({source})",
            f"use the {node} variant of the driver image (multi-arch tag or the -{node} build)",
        )
    ]
