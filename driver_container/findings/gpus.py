"""The GPUs on the PCI bus against the loaded module's flavour and branch (pure: state in, findings out).

The rules are ``formats/gpu_support.py``'s, each with its source; an id they do not know gives nothing. A GPU
the loaded module cannot drive is an error when it leaves the node no GPU at all (``init`` refuses: the
operator's validator would otherwise wait forever on "No devices were found"), a warning when other GPUs
still work. ``FLAVOUR_MISMATCH`` (KERNEL_MODULE_TYPE against the loaded flavour) is folded in here so that
one finding, not two, says which flavour to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver_container.findings.model import Finding, Severity
from driver_container.formats.gpu_support import BLACKWELL_FIRST_BRANCH, GpuSupport, gpu_support

if TYPE_CHECKING:
    from driver_container.formats.kernel.nvidia_proc import ModuleFlavour
    from driver_container.formats.kernel.pci import PciFunction
    from driver_container.inspect.hoststate import HostState

# The Talos system extensions of each flavour (siderolabs/extensions nvidia-gpu/nvidia-modules and
# nvidia-gpu/nonfree/kmod-nvidia, {production,lts}/manifest.yaml.tmpl @ v1.13.9 ec9d5f68fcfb); both tiers of
# both flavours take the same driver version (nvidia-gpu/vars.yaml), so swapping the flavour keeps the image.
TALOS_EXTENSIONS: dict[ModuleFlavour, str] = {
    "open": "nvidia-open-gpu-kernel-modules",
    "proprietary": "nonfree-kmod-nvidia",
}
SHOWN = 4  # GPUs named in one message; the rest are counted


def _known(state: HostState) -> list[tuple[PciFunction, GpuSupport]]:
    return [(g, s) for g in state.pci_gpus if (s := gpu_support(g.device)) is not None]


def _describe(gpus: list[tuple[PciFunction, GpuSupport]]) -> str:
    """``10de:2901 (Blackwell) at 0000:18:00.0, 0000:2a:00.0 and 6 more``, one group per device id."""
    groups: dict[str, list[str]] = {}
    for g, s in gpus:
        groups.setdefault(f"{g.pci_id} ({s.generation})", []).append(g.address)
    parts = []
    for name, addresses in groups.items():
        more = f" and {len(addresses) - SHOWN} more" if len(addresses) > SHOWN else ""
        parts.append(f"{name} at {', '.join(addresses[:SHOWN])}{more}")
    return "; ".join(parts)


def loaded_flavour(state: HostState) -> ModuleFlavour | None:
    """The loaded nvidia module's flavour: its own words in /proc, else its file's license."""
    if not state.modules["nvidia"].loaded:
        return None
    if state.nvidia_version is not None:
        return state.nvidia_version.flavour
    file = state.module_files.get("nvidia")
    return file.flavour if file is not None else None


def needed_flavours(state: HostState) -> tuple[ModuleFlavour, ...]:
    """The flavours that drive every GPU of known rules on the bus (all of them when none is known)."""
    flavours: tuple[ModuleFlavour, ...] = ("open", "proprietary")
    return tuple(f for f in flavours if all(s.drives(f) != "no" for _, s in _known(state)))


def extension_hint(state: HostState) -> str:
    """Which kmod extension to install on Talos, narrowed by the GPUs present (NVIDIA_NOT_LOADED's fix)."""
    needed, known = needed_flavours(state), _known(state)
    if len(needed) != 1 or not known:
        return f"{TALOS_EXTENSIONS['open']} or {TALOS_EXTENSIONS['proprietary']}"
    return f"{TALOS_EXTENSIONS[needed[0]]}-production or -lts: {_describe(known)} need(s) the {needed[0]} modules"


def _flavour_fix(state: HostState, flavour: ModuleFlavour, version: str) -> str:
    needed = needed_flavours(state)
    if not needed:
        wants = "; ".join(f"{_describe([(g, s)])} needs {'/'.join(s.flavours)}" for g, s in _known(state))
        return f"no one flavour drives every GPU of this node ({wants}): move the GPUs of one kind to another node"
    other = needed[0]
    if state.platform.name == "talos":
        fix = (
            f"install the {TALOS_EXTENSIONS[other]}-production or -lts extension instead of "
            f"{TALOS_EXTENSIONS[flavour]}-* (take the same tier: same driver version, so this image still "
            "matches), then reboot the node"
        )
    else:
        fix = f"load NVIDIA's {other} kernel modules of {version} instead of the {flavour} ones, then reboot"
    if state.settings.kernel_module_type not in ("auto", other):
        fix += f"; set KERNEL_MODULE_TYPE={other} (driver.kernelModuleType in the ClusterPolicy)"
    return fix


def _branch_fix(state: HostState) -> str:
    if state.platform.name == "talos":
        return (
            f"use a driver of the {BLACKWELL_FIRST_BRANCH} branch or later with the open modules: the "
            f"{TALOS_EXTENSIONS['open']} extension of a Talos release that ships one (production 570.x from "
            "v1.10, 595.x on v1.13; LTS 580.x from v1.12, docs/talos.md) and the driver image of its version"
        )
    return f"install a driver of the {BLACKWELL_FIRST_BRANCH} branch or later with NVIDIA's open kernel modules"


def gpu_flavour(state: HostState) -> list[Finding]:
    """FLAVOUR_CANNOT_DRIVE_GPU and DRIVER_TOO_OLD_FOR_GPU for the GPUs on the PCI bus."""
    flavour = loaded_flavour(state)
    version = (state.nvidia_version.version if state.nvidia_version else state.modules["nvidia"].version) or "?"
    if flavour is None or not state.pci_gpus:
        return []
    too_old = [(g, s) for g, s in _known(state) if s.branch_too_old(version)]
    refused = [(g, s) for g, s in _known(state) if s.drives(flavour) == "no" and (g, s) not in too_old]
    severity: Severity = "error" if len(too_old) + len(refused) == len(state.pci_gpus) else "warning"
    out: list[Finding] = []
    if refused:
        sources = "; ".join(dict.fromkeys(s.refusal_source(flavour) for _, s in refused))
        none_left = " (nvidia-smi: 'No devices were found')" if severity == "error" else ""
        message = (
            f"the loaded nvidia module is {flavour} ({version}) and cannot drive {len(refused)} of the "
            f"{len(state.pci_gpus)} NVIDIA GPU(s) on the PCI bus{none_left}: {_describe(refused)}; {sources}"
        )
        out.append(Finding(severity, "FLAVOUR_CANNOT_DRIVE_GPU", message, _flavour_fix(state, flavour, version)))
    if too_old:
        message = (
            f"the loaded nvidia module {version} cannot drive {_describe(too_old)}: no release before the "
            f"{BLACKWELL_FIRST_BRANCH} branch supports Blackwell GPUs (NVIDIA/open-gpu-kernel-modules README "
            "'Compatible GPUs' lists none before 570.86.15)"
        )
        out.append(Finding(severity, "DRIVER_TOO_OLD_FOR_GPU", message, _branch_fix(state)))
    return out


def reconcile(state: HostState, found: list[Finding], gpus: list[Finding]) -> list[Finding]:
    """The other checks' findings minus what the GPUs settle: NO_GPUS (nvidia bound nothing) when a GPU
    finding says why; FLAVOUR_MISMATCH when FLAVOUR_CANNOT_DRIVE_GPU already names the flavour to install,
    and its "install the <wanted> modules" when those cannot drive a GPU present."""
    said = {f.code for f in gpus}
    found = [f for f in found if f.code != "NO_GPUS" or not said]
    if "FLAVOUR_CANNOT_DRIVE_GPU" in said:
        return [f for f in found if f.code != "FLAVOUR_MISMATCH"]
    wanted, loaded = state.settings.kernel_module_type, loaded_flavour(state)
    refused = [(g, s) for g, s in _known(state) if wanted in ("open", "proprietary") and s.drives(wanted) == "no"]
    if not refused or loaded is None:
        return found
    fix = (
        f"set KERNEL_MODULE_TYPE={loaded} (driver.kernelModuleType in the ClusterPolicy): the {wanted} modules "
        f"cannot drive {_describe(refused)}"
    )
    return [f._replace(fix=fix) if f.code == "FLAVOUR_MISMATCH" else f for f in found]
