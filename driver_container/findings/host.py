"""Checks of the host around the modules: parameters, environment, firmware, fabric, DRIVER_ROOT's mount,
the last publish."""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver_container.driverroot.manifest import MANIFEST_PATH
from driver_container.driverroot.mount import UNUSABLE_ROOT_FIX
from driver_container.driverroot.procsys import OPT_IN, PROC_FIX, PROC_MPS, PROC_MPS_NOTE, PROC_MPS_OFF, SYS_FIX
from driver_container.findings.firmware import firmware
from driver_container.findings.model import (
    Finding,
    talos_module_snippet,
    values_equal,
)

if TYPE_CHECKING:
    from driver_container.driverroot.state import RootState
    from driver_container.inspect.hoststate import HostState
    from driver_container.readers.fabric import FabricKind


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


def _unknown_parameter(state: HostState, module: str, name: str, value: str, known: tuple[str, ...]) -> Finding:
    """An error where this container loads the modules (the kernel would refuse the parameter); on Talos a
    warning: nothing from the kernelModuleConfig ConfigMap is ever applied there (machined loads the
    modules with the machine config's parameters), so the name only shows a mistaken ConfigMap."""
    has = ", ".join(sorted(known)) or "none"
    message = f"{module} has no parameter {name} (requested {name}={value}); it has: {has}"
    fix = f"remove or correct {name} in the kernelModuleConfig ConfigMap ({module}.conf)"
    if state.platform.name != "talos":
        return Finding("error", "UNKNOWN_PARAMETER", message, fix)
    return Finding(
        "warning",
        "UNKNOWN_PARAMETER",
        message + "; on Talos that ConfigMap is never applied (machined loads the modules)",
        fix + "; on Talos give module parameters in the machine config only",
    )


def parameters(state: HostState) -> list[Finding]:
    out = [
        Finding("error", "PARAMETER_FILE_INVALID", str(e), "fix the kernelModuleConfig ConfigMap")
        for e in state.param_errors
    ]
    for module, pairs in state.requested_params.items():
        known = _known_parameters(state, module)
        loaded = state.modules[module]
        for name, value in pairs:
            if known is not None and name not in known:
                out.append(_unknown_parameter(state, module, name, value, known))
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


def environment(state: HostState) -> list[Finding]:
    out = [
        Finding("warning", "HOST_FILE_UNREADABLE", str(p), "check the mounts of PROCFS_ROOT, SYSFS_ROOT and /host")
        for p in state.problems
    ]
    out += firmware(state)
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
    out += _publish_state(state.root)
    if not state.root.published:
        out.append(
            Finding(
                "info",
                "DRIVER_ROOT_NOT_PUBLISHED",
                f"{state.root.path} holds no published driver (no {MANIFEST_PATH})",
                "run `nvidia-driver init`",
            )
        )
    return out


def _fabric_image_fix(kind: FabricKind) -> str:
    what = "Fabric Manager and NVLSM" if kind == "nvlink5" else "Fabric Manager"
    return (
        f"use an image built with NVIDIA's {what} of the loaded driver version (docs/fabric.md), or run it on "
        "the host (Talos: the nvidia-fabricmanager-production or -lts extension of that driver version) and set "
        "NVIDIA_FABRICMANAGER=false"
    )


def fabric(state: HostState) -> list[Finding]:
    """NVSwitch / NVLink5 nodes (docs/fabric.md): no CUDA job runs until the fabric is trained."""
    fab = state.fabric
    if fab is None:
        return []
    by_host = fab.host_runs("nv-fabricmanager")
    out: list[Finding] = []
    wanted = state.settings.fabricmanager != "false" and by_host is None
    if wanted and (fab.fm_binary is None or fab.fm_config is None):
        out.append(
            Finding(
                "error",
                "FABRIC_MANAGER_MISSING",
                f"{fab.kind} system ({len(fab.nvswitch_devices)} NVSwitch, "
                f"LPF {', '.join(fab.lpf_devices) or '-'}) but "
                f"the image has no nv-fabricmanager with usr/share/nvidia/nvswitch/fabricmanager.cfg under "
                f"{state.userspace.root}: GPU jobs would fail with CUDA_ERROR_SYSTEM_NOT_READY",
                _fabric_image_fix(fab.kind),
            )
        )
    if (
        wanted
        and fab.needs_nvlsm
        and fab.host_runs("nvlsm") is None
        and (fab.nvlsm_binary is None or fab.nvlsm_config is None)
    ):
        out.append(
            Finding(
                "error",
                "NVLSM_MISSING",
                f"NVLink5 system (LPF {', '.join(fab.lpf_devices)}) but the image has no nvlsm with "
                f"usr/share/nvidia/nvlsm/nvlsm.conf under {state.userspace.root}",
                _fabric_image_fix(fab.kind),
            )
        )
    if fab.missing_modules:
        out.append(
            Finding(
                "warning",
                "NVLINK5_MODULES_MISSING",
                f"NVLink5 system but {', '.join(fab.missing_modules)} not loaded: NVLSM cannot reach the NVSwitches "
                "(init waits for them up to MODULE_WAIT_TIMEOUT)",
                "load them on the host; Talos: machine.kernel.modules with - name: mlx5_core, - name: mlx5_ib, "
                "- name: ib_umad (docs/fabric.md)",
            )
        )
    elif fab.needs_nvlsm and fab.management_port is None:
        out.append(
            Finding(
                "warning",
                "NVLINK5_NO_MANAGEMENT_PORT",
                f"no port of {', '.join(fab.lpf_devices)} has a GUID with the subnet manager enabled "
                "(sysfs ports/<n>/gids/0 and cap_mask)",
                "check the CX7 bridge's ports (ibstat) and that ib_umad is loaded",
            )
        )
    who = (
        f"run by the host ({by_host.evidence})"
        if by_host
        else (
            "left to the host (NVIDIA_FABRICMANAGER=false)"
            if state.settings.fabricmanager == "false"
            else "started by init"
        )
    )
    out.append(
        Finding(
            "info",
            "FABRIC_SYSTEM",
            f"{fab.kind} system: Fabric Manager {who}; Ready waits until nvidia-smi -q shows the fabric Completed",
            "nothing to do",
        )
    )
    return out


def driver_root_usability(root: RootState) -> list[Finding]:
    """A published root that its consumers cannot execute or map from: ``status``'s run of the same proof
    ``init`` makes before Ready (driverroot/proof.py), not a reading of a mount table."""
    proof = root.proof
    if proof is None or proof.ok:
        return []
    return [
        Finding(
            "error",
            "DRIVER_ROOT_NOT_EXECUTABLE",
            f"the published driver root {root.path} cannot be used by its consumers (validator, device "
            f"plugin, CDI containers): {'; '.join(proof.failures)}; {proof.flags.describe()}",
            UNUSABLE_ROOT_FIX,
        )
    ]


def driver_root_proc_sys(state: HostState) -> list[Finding]:
    """The root's ``sys`` without the read-only sysfs ``init`` mounts there, and any procfs at its ``proc``
    (driverroot/procsys.py): the first stops gpu-operator's validator, the second hands the node to every
    consumer of the root."""
    found = state.root.proc_sys
    if found is None:
        return []
    findings = []
    opted_in = state.settings.root_procfs == "mps-minimal" and found.shell
    if opted_in:  # on the Node while it is on: the Ready report's state is read before the mount
        note = f"{OPT_IN}: {state.root.path}/proc: {PROC_MPS_NOTE}"
        findings.append(Finding("warning", "DRIVER_ROOT_PROCFS_MPS", note, PROC_MPS_OFF))
    if found.proc is not None and not (opted_in and found.proc.source == PROC_MPS.source):
        findings.append(
            Finding(
                "warning",
                "DRIVER_ROOT_PROC_MOUNTED",
                f"the published driver root {state.root.path} has a procfs mounted at proc ({found.proc.source}, "
                f"{','.join(found.proc.options)}): every consumer of the root reaches the node through it, "
                "read-only bind or not (/proc/sys, every process's command line, /proc/<pid>/root)",
                PROC_FIX,
            )
        )
    if state.root.published and found.shell and found.sys is None:
        findings.append(
            Finding(
                "warning",
                "DRIVER_ROOT_SYS_MISSING",
                f"the published driver root {state.root.path} has no sysfs mounted at sys: gpu-operator's "
                "validator reads its sys/bus/pci/devices (and exits 1 without it), libcuda in NVIDIA's DRA "
                "driver's chrooted MPS server reads /sys",
                SYS_FIX,
            )
        )
    return findings


# Findings about the outcome of the last publish: `status` reports them, `init` (which publishes again)
# only logs them.
PUBLISH_OUTCOMES = frozenset({"LAST_PUBLISH_FAILED", "PUBLISH_INTERRUPTED"})


def _publish_state(root: RootState) -> list[Finding]:
    """A failed or interrupted publish: the root is the previous one (rolled back), not the one wanted."""
    out = []
    shown = f"version {root.version} is published" if root.version else "nothing is published"
    if root.failure is not None:
        version, error = root.failure
        out.append(
            Finding(
                "error",
                "LAST_PUBLISH_FAILED",
                f"the last publish (of {version}) failed and was rolled back; {shown} in {root.path}: {error}",
                "fix the cause named in the error, then restart the driver pod (`nvidia-driver init`)",
            )
        )
    if root.interrupted:
        out.append(
            Finding(
                "warning",
                "PUBLISH_INTERRUPTED",
                f"a publish into {root.path} was killed mid-commit (journal left); {shown} once the next "
                "start rolls it back",
                "restart the driver pod: `init` rolls the interrupted publish back before anything else",
            )
        )
    return out
