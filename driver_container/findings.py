"""Cross-checks of a ``HostState``: pure, state in, findings out. Codes are stable (docs/troubleshooting.md).

Why the version checks are errors: nvidia-container-cli mounts only libraries whose file name ends with
the loaded module's version, and NVML refuses a kernel module of another version ("Driver/library version
mismatch"), so every GPU pod would fail later; refusing here names the cause once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from driver_container.hoststate import HostState, LoadedModule
    from driver_container.modfiles import ModuleFile

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


def talos_module_snippet(module: str, params: list[str]) -> str:
    """The machine-config text that makes Talos (machined) load ``module`` with ``params``."""
    items = "".join(f"\n          - {p}" for p in params)
    items2 = "".join(f"\n  - {p}" for p in params)
    return (
        "add to the Talos machine config (Talos < 1.14, machine.kernel.modules):\n"
        f"machine:\n  kernel:\n    modules:\n      - name: {module}\n        parameters:{items}\n"
        "or, Talos >= 1.14, a KernelModuleConfig document (applied after a reboot):\n"
        f"apiVersion: v1alpha1\nkind: KernelModuleConfig\nname: {module}\nparameters:{items2}"
    )


def _load_fix(state: HostState, module: str) -> str:
    if state.platform.name == "talos":
        return (
            "install the NVIDIA kmod system extension (nvidia-open-gpu-kernel-modules or nonfree-kmod-nvidia) "
            f"and list {module} in the machine config; " + talos_module_snippet(module, []).split("\nor,")[0]
        )
    return f"load it on the host (modprobe {module.replace('_', '-')}) or run `nvidia-driver load`"


def values_equal(requested: str, effective: str) -> bool:
    """Compare a requested parameter value with the kernel's printed one (Y/N for bool, decimal ints)."""
    a, b = requested.strip().strip("\"'"), effective.strip().strip("\"'")
    if a == b:
        return True
    if b in ("Y", "N") and a.lower() in _TRUE | _FALSE:
        return (a.lower() in _TRUE) == (b == "Y")
    try:
        return int(a, 0) == int(b, 0)
    except ValueError:
        return False


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
    if state.settings.gpu_direct_rdma and not mods["nvidia_peermem"].loaded:
        out.append(
            Finding(
                "warning",
                "PEERMEM_NOT_LOADED",
                "GPU_DIRECT_RDMA_ENABLED=true but nvidia_peermem is not loaded",
                _load_fix(state, "nvidia_peermem"),
            )
        )
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


def _param_fix(state: HostState, module: str) -> str:
    params = [f"{n}={v}" for n, v in state.requested_params.get(module, ())]
    if state.platform.name == "talos":
        return talos_module_snippet(module, params) + "\nthen reboot the node (Talos never reloads a loaded module)"
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
                    "ship it in the image under /lib/firmware (the GSP firmware of the same driver version) "
                    "so that `init` publishes it",
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
    findings = _module_presence(state) + _versions(state) + _flavour(state)
    for name, module in state.modules.items():
        findings += _file_checks(state, module, state.module_files.get(name))
    findings += _parameters(state) + _environment(state)
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
