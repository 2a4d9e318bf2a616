"""The GPUs on the PCI bus against the loaded module's flavour and branch (pure: state in, findings out).

What a GPU needs comes from the image's own supported-gpus.json where it lists the id (the exact driver's
word: formats/supported_gpus.py), else from the table of ``formats/gpu_support.py``, each rule with its
source; an id neither knows gives nothing. A GPU the loaded module cannot drive (wrong flavour, a branch
before its first or after its last) is an error when it leaves the node no GPU at all (``init`` refuses: the
operator's validator would otherwise wait forever on "No devices were found"), a warning when other GPUs
still work. ``FLAVOUR_MISMATCH`` (KERNEL_MODULE_TYPE against the loaded flavour) is folded in here so that
one finding, not two, says which flavour to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver_container.findings.model import Finding, Severity
from driver_container.formats.gpu_support import BLACKWELL_FIRST_BRANCH, GpuSupport

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
# Talos's LTS tier is the 580 branch from v1.12 on, and its production tier 595 from v1.13 (siderolabs/extensions
# nvidia-gpu/vars.yaml NVIDIA_DRIVER_{LTS,PRODUCTION}_VERSION: 580.178.04 / 595.91.07 @ v1.13.9 ec9d5f68fcfb;
# docs/talos.md): the last branch of Maxwell, Pascal and Volta is the LTS one.
TALOS_LTS_BRANCH = 580
DEPRECATION_NOTICE = (
    "NVIDIA: 'the Release 580 series will be the last to support GPUs based on the Maxwell, Pascal, and Volta "
    "architectures' (Unix Graphics Feature Deprecation Schedule)"
)


def _known(state: HostState) -> list[tuple[PciFunction, GpuSupport]]:
    return [(g, s) for g in state.pci_gpus if (s := state.support_of(g.device)) is not None]


def _lts_only(known: list[tuple[PciFunction, GpuSupport]]) -> bool:
    """Whether a GPU present is last driven by the LTS branch, so the production tier would not drive it."""
    return any(s.last_branch == TALOS_LTS_BRANCH for _, s in known)


def _tiers(known: list[tuple[PciFunction, GpuSupport]]) -> str:
    return "-lts" if _lts_only(known) else "-production or -lts"


def _describe(gpus: list[tuple[PciFunction, GpuSupport]]) -> str:
    """``10de:2901 (Blackwell) at 0000:18:00.0, 0000:2a:00.0 and 6 more``, one group per device id."""
    groups: dict[str, list[str]] = {}
    for g, s in gpus:
        groups.setdefault(f"{g.pci_id} ({s.label})", []).append(g.address)
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
    tiers = _tiers(known)
    why = f" of the {TALOS_LTS_BRANCH} branch (the production tier no longer drives them)" if tiers == "-lts" else ""
    return f"{TALOS_EXTENSIONS[needed[0]]}{tiers}: {_describe(known)} need(s) the {needed[0]} modules{why}"


def _flavour_fix(state: HostState, flavour: ModuleFlavour, version: str) -> str:
    needed = needed_flavours(state)
    if not needed:
        wants = "; ".join(f"{_describe([(g, s)])} needs {'/'.join(s.flavours)}" for g, s in _known(state))
        return f"no one flavour drives every GPU of this node ({wants}): move the GPUs of one kind to another node"
    other = needed[0]
    if state.platform.name == "talos":
        fix = (
            f"install the {TALOS_EXTENSIONS[other]}{_tiers(_known(state))} extension instead of "
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


def _dropped_fix(state: HostState, dropped: list[tuple[PciFunction, GpuSupport]], flavour: ModuleFlavour) -> str:
    """Per last branch: the Talos tier that still ships it, else NVIDIA's legacy driver of that branch."""
    needed: ModuleFlavour = "proprietary" if any(s.open == "no" for _, s in dropped) else flavour
    others = [(g, s) for g, s in _known(state) if (g, s) not in dropped and s.drives(needed) == "no"]
    if others:  # e.g. a Pascal GPU beside Blackwell ones: the legacy driver's flavour cannot drive those
        return (
            f"no one flavour drives every GPU of this node ({_describe(others)} cannot use the {needed} modules "
            f"that {_describe(dropped)} need): move the GPUs of one kind to another node"
        )
    fixes = []
    for last in sorted({s.last_branch for _, s in dropped if s.last_branch is not None}, reverse=True):
        if state.platform.name != "talos":
            fixes.append(
                f"install NVIDIA's {last} branch driver ({needed} kernel modules) and this image of its version"
            )
        elif last == TALOS_LTS_BRANCH:
            fixes.append(
                f"install the {TALOS_EXTENSIONS[needed]}-lts extension (the LTS tier: the {last} branch on Talos "
                f"v1.12 and later, 580.178.04 on v1.13.9; production is 595.x from v1.13) instead of "
                f"{TALOS_EXTENSIONS[flavour]}-production, use the driver image of its version "
                f"(<version>-talosv<Talos version>, docs/talos.md), then reboot the node"
            )
        else:
            fixes.append(
                f"no Talos extension ships the {last} branch: move these GPUs to a host with NVIDIA's {last} driver"
            )
    return "; ".join(fixes)


def _dropped_message(dropped: list[tuple[PciFunction, GpuSupport]], version: str, of_all: str) -> str:
    by_branch: dict[int | None, list[tuple[PciFunction, GpuSupport]]] = {}
    for g, s in dropped:
        by_branch.setdefault(s.last_branch, []).append((g, s))
    groups = "; ".join(f"{_describe(group)}: last driven by the {b} branch" for b, group in by_branch.items())
    sources = dict.fromkeys(
        DEPRECATION_NOTICE if s.source == "table" else f"{s.source} lists it with legacybranch {s.last_branch}.xx"
        for _, s in dropped
    )
    return (
        f"the loaded nvidia module {version} cannot drive {len(dropped)} of the {of_all}: NVIDIA moved them to a "
        f"legacy branch ({groups}); {'; '.join(sources)}"
    )


def gpu_flavour(state: HostState) -> list[Finding]:
    """DRIVER_DROPPED_GPU, FLAVOUR_CANNOT_DRIVE_GPU and DRIVER_TOO_OLD_FOR_GPU for the GPUs on the PCI bus."""
    flavour = loaded_flavour(state)
    version = (state.nvidia_version.version if state.nvidia_version else state.modules["nvidia"].version) or "?"
    if flavour is None or not state.pci_gpus:
        return []
    known = _known(state)
    dropped = [(g, s) for g, s in known if s.dropped(version)]
    too_old = [(g, s) for g, s in known if s.branch_too_old(version) and (g, s) not in dropped]
    refused = [(g, s) for g, s in known if s.drives(flavour) == "no" and (g, s) not in too_old + dropped]
    severity: Severity = "error" if len(dropped + too_old + refused) == len(state.pci_gpus) else "warning"
    none_left = " (nvidia-smi: 'No devices were found')" if severity == "error" else ""
    of_all = f"{len(state.pci_gpus)} NVIDIA GPU(s) on the PCI bus{none_left}"
    out: list[Finding] = []
    if dropped:
        message = _dropped_message(dropped, version, of_all)
        out.append(Finding(severity, "DRIVER_DROPPED_GPU", message, _dropped_fix(state, dropped, flavour)))
    if refused:
        sources = "; ".join(dict.fromkeys(s.refusal_source(flavour) for _, s in refused))
        message = (
            f"the loaded nvidia module is {flavour} ({version}) and cannot drive {len(refused)} of the "
            f"{of_all}: {_describe(refused)}; {sources}"
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
