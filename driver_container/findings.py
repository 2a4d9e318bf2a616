"""Cross-checks of a ``HostState``: pure, state in, findings out. Codes are stable (docs/troubleshooting.md).

Why the version checks are errors: nvidia-container-cli mounts only libraries whose file name ends with
the loaded module's version, and NVML refuses a kernel module of another version ("Driver/library version
mismatch"), so every GPU pod would fail later; refusing here names the cause once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from driver_container.formats.elfarch import machine_name, normalise_arch
from driver_container.formats.numbers import parse_c_int

if TYPE_CHECKING:
    from driver_container.inspect.hoststate import HostState, LoadedModule
    from driver_container.inspect.modfiles import ModuleFile

SEVERITIES = ("error", "warning", "info")
_TRUE = {"y", "yes", "1", "true", "on"}
_FALSE = {"n", "no", "0", "false", "off"}


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" | "warning" | "info"
    code: str
    message: str
    fix: str


def has_errors(findings: list[Finding] | tuple[Finding, ...]) -> bool:
    return any(f.severity == "error" for f in findings)


def talos_module_snippet(module: str, params: list[str], talos_version: str | None = None) -> str:
    """The machine-config text that makes Talos (machined) load ``module`` with ``params``, in the one form
    ``talos_version`` supports (driver_container/formats/talos_config.py)."""
    from driver_container.formats.talos_config import module_config_snippet, snippet_heading

    return snippet_heading(talos_version) + "\n" + module_config_snippet([(module, params)], talos_version)


def _load_fix(state: HostState, module: str) -> str:
    if state.platform.name == "talos":
        return (
            "install the NVIDIA kmod system extension (nvidia-open-gpu-kernel-modules or nonfree-kmod-nvidia) "
            f"and list {module} in the machine config; "
            + talos_module_snippet(module, [], state.platform.talos_version)
        )
    return f"load it on the host (modprobe {module.replace('_', '-')}) or run `nvidia-driver load`"


# GPUDirect RDMA on Talos (docs/talos.md): no MOFED, so nvidia-peermem's init fails with -EINVAL; the
# DMA-BUF path needs CONFIG_DMABUF_MOVE_NOTIFY and CONFIG_PCI_P2PDMA, both =y in the amd64 kernel since
# Talos 1.13 (siderolabs/pkgs kernel/build/config-amd64, f541ca434ee63964319bb912e370f0ed407f8a18).
PEERMEM_ON_TALOS_FIX = (
    "use DMA-BUF instead: the Talos amd64 kernel (1.13 and later) has CONFIG_DMABUF_MOVE_NOTIFY and "
    "CONFIG_PCI_P2PDMA, and the open NVIDIA kernel modules export GPU memory as dma-buf (NCCL/UCX use it "
    "when available); do not list nvidia_peermem in the machine config (machined would retry it forever), "
    "and set GPU_DIRECT_RDMA_ENABLED=false (driver.rdma.enabled=false) to silence this"
)


def _peermem(state: HostState) -> list[Finding]:
    if not state.settings.gpu_direct_rdma or state.modules["nvidia_peermem"].loaded:
        return []
    if state.platform.name == "talos":
        message = (
            "GPU_DIRECT_RDMA_ENABLED=true, but nvidia_peermem cannot load on Talos (no MOFED: its init "
            "returns -EINVAL); init does not wait for it"
        )
        return [Finding("warning", "PEERMEM_NOT_ON_TALOS", message, PEERMEM_ON_TALOS_FIX)]
    message = "GPU_DIRECT_RDMA_ENABLED=true but nvidia_peermem is not loaded"
    return [Finding("warning", "PEERMEM_NOT_LOADED", message, _load_fix(state, "nvidia_peermem"))]


def values_equal(requested: str, effective: str) -> bool:
    """Compare a requested parameter value with the kernel's printed one (Y/N for bool, decimal ints)."""
    a, b = requested.strip().strip("\"'"), effective.strip().strip("\"'")
    if a == b:
        return True
    if b in ("Y", "N") and a.lower() in _TRUE | _FALSE:
        return (a.lower() in _TRUE) == (b == "Y")
    number_a, number_b = parse_c_int(a), parse_c_int(b)
    return number_a is not None and number_a == number_b


def _module_presence(state: HostState) -> list[Finding]:
    out: list[Finding] = []
    mods = state.modules
    if not mods["nvidia"].loaded:
        out.append(
            Finding("error", "NVIDIA_NOT_LOADED", "the nvidia kernel module is not loaded", _load_fix(state, "nvidia"))
        )
    if not mods["nvidia_uvm"].loaded:
        out.append(
            Finding(
                "error",
                "UVM_NOT_LOADED",
                "nvidia_uvm is not loaded: CUDA and the operator's validator need its device major in /proc/devices",
                _load_fix(state, "nvidia_uvm"),
            )
        )
    if state.settings.nvidia_modeset and not mods["nvidia_modeset"].loaded:
        out.append(
            Finding(
                "warning",
                "MODESET_NOT_LOADED",
                "nvidia_modeset is not loaded",
                _load_fix(state, "nvidia_modeset") + " (or set NVIDIA_MODESET=false)",
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


def loaded_version(state: HostState) -> str | None:
    if state.nvidia_version is not None:
        return state.nvidia_version.version
    return state.modules["nvidia"].version


def _versions(state: HostState) -> list[Finding]:
    out: list[Finding] = []
    us, loaded, wanted = state.userspace, loaded_version(state), state.settings.driver_version
    if us.version is None:
        out.append(
            Finding(
                "error",
                "USERSPACE_MISSING",
                f"no libcuda.so.<version> or libnvidia-ml.so.<version> under USERSPACE_ROOT={us.root}",
                "set USERSPACE_ROOT to the image root holding the NVIDIA userspace, or use an image that has it",
            )
        )
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
    if loaded and us.version and loaded != us.version:
        out.append(
            Finding(
                "error",
                "VERSION_MISMATCH",
                f"the loaded kernel module is {loaded} but the image's userspace is {us.version}: "
                "GPU pods would fail with 'Driver/library version mismatch'",
                f"run the driver image for {loaded} (tag {loaded}-<os>), or make the host load {us.version} "
                "modules (on Talos: the kmod extension of that version) and reboot",
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


def _file_checks(state: HostState, m: LoadedModule, f: ModuleFile | None) -> list[Finding]:
    if f is None:
        if m.loaded and not m.builtin and state.kernel_release:
            return [
                Finding(
                    "info",
                    "MODULE_FILE_MISSING",
                    f"no file for loaded {m.name} under HOST_ROOT/{{usr/,}}lib/modules/{state.kernel_release}",
                    "mount the host root at HOST_ROOT to verify the module files (optional)",
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


def _flavour(state: HostState) -> list[Finding]:
    wanted = state.settings.kernel_module_type
    if wanted not in ("open", "proprietary"):
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


def _architecture(state: HostState) -> list[Finding]:
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


def _param_fix(state: HostState, module: str) -> str:
    params = [f"{n}={v}" for n, v in state.requested_params.get(module, ())]
    if state.platform.name == "talos":
        snippet = talos_module_snippet(module, params, state.platform.talos_version)
        return snippet + "\nthen reboot the node (Talos never reloads a loaded module)"
    return f"add `options {module} {' '.join(params)}` to the host's /etc/modprobe.d/ and reload {module}"


def _known_parameters(state: HostState, module: str) -> tuple[str, ...] | None:
    """Parameter names the module declares: its file's parm list, else NVIDIA's complete params file."""
    f = state.module_files.get(module)
    if f is not None and not f.error:
        return f.parameters
    if module == "nvidia" and state.modules["nvidia"].parameters:
        return tuple(state.modules["nvidia"].parameters)
    return None


def _parameters(state: HostState) -> list[Finding]:
    out = [
        Finding("error", "PARAMETER_FILE_INVALID", e, "fix the kernelModuleConfig ConfigMap")
        for e in state.param_errors
    ]
    for module, pairs in state.requested_params.items():
        known = _known_parameters(state, module)
        loaded = state.modules[module]
        for name, value in pairs:
            if known is not None and name not in known:
                out.append(
                    Finding(
                        "error",
                        "UNKNOWN_PARAMETER",
                        f"{module} has no parameter {name} "
                        f"(requested {name}={value}); it has: {', '.join(sorted(known)) or 'none'}",
                        f"remove or correct {name} in the kernelModuleConfig ConfigMap ({module}.conf)",
                    )
                )
                continue
            if not loaded.loaded:
                continue
            effective = loaded.parameters.get(name)
            if effective is None:
                out.append(
                    Finding(
                        "info",
                        "PARAMETER_UNVERIFIABLE",
                        f"{module}: requested {name}={value}; the kernel does not expose its effective value",
                        "nothing to do",
                    )
                )
            elif not values_equal(value, effective):
                out.append(
                    Finding(
                        "warning",
                        "PARAMETER_DIFFERS",
                        f"{module}: {name} is {effective} in the running kernel but {value} is requested",
                        _param_fix(state, module),
                    )
                )
    return out


def _environment(state: HostState) -> list[Finding]:
    out = [
        Finding("warning", "HOST_FILE_UNREADABLE", p, "check the mounts of PROCFS_ROOT, SYSFS_ROOT, HOST_ROOT")
        for p in state.problems
    ]
    for name, where in sorted(state.firmware.items()):
        if where is None:
            out.append(
                Finding(
                    "warning",
                    "FIRMWARE_MISSING",
                    f"firmware {name} (named by the module) is in none of "
                    "the kernel's, the toolkit's or the image's firmware directories",
                    _firmware_fix(state),
                )
            )
    if state.modules["nvidia"].loaded and not state.modules["nvidia"].builtin and not state.gpus:
        out.append(
            Finding(
                "warning",
                "NO_GPUS",
                "nvidia is loaded but /proc/driver/nvidia/gpus lists no GPU",
                "check that the node has an NVIDIA GPU bound to the nvidia driver (lspci -k)",
            )
        )
    if state.platform.name == "generic" and state.platform.os_id is None:
        out.append(
            Finding(
                "info",
                "PLATFORM_UNKNOWN",
                f"no usable os-release; platform {state.platform.name} ({state.platform.evidence})",
                "mount the host's /etc/os-release at /host-etc/os-release or set DRIVER_PLATFORM",
            )
        )
    out += _publish_state(state)
    if not state.published:
        out.append(
            Finding(
                "info",
                "DRIVER_ROOT_NOT_PUBLISHED",
                f"{state.driver_root} holds no published driver (no .driver-container/manifest.json)",
                "run `nvidia-driver init`",
            )
        )
    return out


def _firmware_fix(state: HostState) -> str:
    fix = (
        "ship it in the image under /lib/firmware (the GSP firmware of the same driver version) "
        "so that `init` publishes it"
    )
    if state.platform.name != "talos":
        return fix
    # The loader is built in (CONFIG_FW_LOADER=y), so its search path is the kernel argument
    # firmware_class.path= (drivers/base/firmware_loader/main.c); init writes the runtime parameter too,
    # but that is lost at reboot and read-only under SELinux enforcing (docs/talos.md).
    return (
        fix + "; on Talos also make the search path persistent with the kernel argument "
        "firmware_class.path=<host driver root>/lib/firmware (machine.install.extraKernelArgs, "
        "or the Image Factory schematic's extraKernelArgs)"
    )


def _fabric_image_fix(kind: str) -> str:
    what = "Fabric Manager and NVLSM" if kind == "nvlink5" else "Fabric Manager"
    return (
        f"use an image built with NVIDIA's {what} of the loaded driver version (docs/fabric.md), or run it on "
        "the host (Talos: the nvidia-fabricmanager extension) and set NVIDIA_FABRICMANAGER=false"
    )


def _fabric(state: HostState) -> list[Finding]:
    """NVSwitch / NVLink5 nodes (docs/fabric.md): no CUDA job runs until the fabric is trained."""
    fab = state.fabric
    if fab is None:
        return []
    by_host = fab.host_runs("nv-fabricmanager")
    out: list[Finding] = []
    wanted = state.settings.fabricmanager != "false" and by_host is None
    if wanted and (fab.fm_binary is None or fab.fm_config is None):
        out.append(Finding(
            "error", "FABRIC_MANAGER_MISSING",
            f"{fab.kind} system ({len(fab.nvswitch_devices)} NVSwitch, LPF {', '.join(fab.lpf_devices) or '-'}) but "
            f"the image has no nv-fabricmanager with usr/share/nvidia/nvswitch/fabricmanager.cfg under "
            f"{state.userspace.root}: GPU jobs would fail with CUDA_ERROR_SYSTEM_NOT_READY",
            _fabric_image_fix(fab.kind),
        ))
    if wanted and fab.needs_nvlsm and fab.host_runs("nvlsm") is None and (
        fab.nvlsm_binary is None or fab.nvlsm_config is None
    ):
        out.append(Finding(
            "error", "NVLSM_MISSING",
            f"NVLink5 system (LPF {', '.join(fab.lpf_devices)}) but the image has no nvlsm with "
            f"usr/share/nvidia/nvlsm/nvlsm.conf under {state.userspace.root}",
            _fabric_image_fix(fab.kind),
        ))
    if fab.missing_modules:
        out.append(Finding(
            "warning", "NVLINK5_MODULES_MISSING",
            f"NVLink5 system but {', '.join(fab.missing_modules)} not loaded: NVLSM cannot reach the NVSwitches "
            "(init waits for them up to MODULE_WAIT_TIMEOUT)",
            "load them on the host; Talos: machine.kernel.modules with - name: mlx5_core, - name: mlx5_ib, "
            "- name: ib_umad (docs/fabric.md)",
        ))
    elif fab.needs_nvlsm and fab.management_port is None:
        out.append(Finding(
            "warning", "NVLINK5_NO_MANAGEMENT_PORT",
            f"no port of {', '.join(fab.lpf_devices)} has a GUID with the subnet manager enabled "
            "(sysfs ports/<n>/gids/0 and cap_mask)",
            "check the CX7 bridge's ports (ibstat) and that ib_umad is loaded",
        ))
    who = f"run by the host ({by_host.evidence})" if by_host else (
        "left to the host (NVIDIA_FABRICMANAGER=false)" if state.settings.fabricmanager == "false"
        else "started by init")
    out.append(Finding(
        "info", "FABRIC_SYSTEM",
        f"{fab.kind} system: Fabric Manager {who}; Ready waits until nvidia-smi -q shows the fabric Completed",
        "nothing to do",
    ))
    return out


def _driver_root_mount(state: HostState) -> list[Finding]:
    """A published root on a noexec/nodev filesystem (node/rootmount.py): consumers cannot use it."""
    from driver_container.node.rootmount import MOUNT_SOURCE, blocking_options

    mount = state.driver_root_mount
    blocking = blocking_options(mount) if mount is not None and state.published else ()
    if mount is None or not blocking:
        return []
    effects = {
        "noexec": "nothing in it can be run or mapped executable (validator, device plugin, CDI containers)",
        "nodev": "its device nodes cannot be opened",
    }
    return [
        Finding(
            "error",
            "DRIVER_ROOT_NOT_EXECUTABLE",
            f"the published driver root {state.driver_root} is on {mount.fstype} {mount.source} at "
            f"{mount.mount_point} mounted {','.join(mount.options)}: "
            + "; ".join(f"{o}: {effects[o]}" for o in blocking),
            f"restart the driver container with CAP_SYS_ADMIN (gpu-operator runs it privileged) and "
            f"RUN_DIR shared (Bidirectional): `init` then mounts a tmpfs {MOUNT_SOURCE} at DRIVER_ROOT",
        )
    ]


# Errors ``init`` itself remedies (it mounts DRIVER_ROOT before publishing): its verify step goes on.
REMEDIED_BY_INIT = frozenset({"DRIVER_ROOT_NOT_EXECUTABLE"})


# Findings about the outcome of the last publish: `status` reports them, `init` (which publishes again)
# only logs them.
PUBLISH_OUTCOMES = frozenset({"LAST_PUBLISH_FAILED", "PUBLISH_INTERRUPTED"})


def _publish_state(state: HostState) -> list[Finding]:
    """A failed or interrupted publish: the root is the previous one (rolled back), not the one wanted."""
    out = []
    shown = f"version {state.published_version} is published" if state.published_version else "nothing is published"
    if state.publish_failure is not None:
        version, error = state.publish_failure
        out.append(
            Finding(
                "error",
                "LAST_PUBLISH_FAILED",
                f"the last publish (of {version}) failed and was rolled back; {shown} in {state.driver_root}: {error}",
                "fix the cause named in the error, then restart the driver pod (`nvidia-driver init`)",
            )
        )
    if state.publish_interrupted:
        out.append(
            Finding(
                "warning",
                "PUBLISH_INTERRUPTED",
                f"a publish into {state.driver_root} was killed mid-commit (journal left); {shown} once the next "
                "start rolls it back",
                "restart the driver pod: `init` rolls the interrupted publish back before anything else",
            )
        )
    return out


def check(state: HostState) -> list[Finding]:
    """Every finding for ``state``, errors first, in a stable order."""
    findings = _module_presence(state) + _versions(state) + _flavour(state) + _architecture(state)
    for name, module in state.modules.items():
        findings += _file_checks(state, module, state.module_files.get(name))
    findings += _parameters(state) + _environment(state) + _fabric(state) + _driver_root_mount(state)
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
