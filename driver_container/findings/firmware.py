"""Checks of the GSP firmware the loaded module names: found at all, and found by the kernel's own loader."""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver_container.findings.model import Finding

if TYPE_CHECKING:
    from driver_container.inspect.hoststate import HostState


def firmware(state: HostState) -> list[Finding]:
    out: list[Finding] = []
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
    return out + _firmware_search_path(state)


def _firmware_search_path(state: HostState) -> list[Finding]:
    """Firmware the module names that only the published root holds, while the kernel's search path does
    not lead there: the GPU's GSP boots from it when the GPU is first opened, so that open would fail.
    Only for a root already published (before that, ``init`` sets the path itself)."""
    root = str(state.root.path).rstrip("/") + "/"
    stranded = sorted(
        name
        for name, where in state.firmware.items()
        if where is not None and where.startswith(root) and name not in state.firmware_kernel_sees
    )
    if not stranded:
        return []
    current = "unreadable" if state.firmware_search_path is None else repr(state.firmware_search_path)
    return [
        Finding(
            "warning",
            "FIRMWARE_PATH_UNSET",
            f"firmware {', '.join(stranded)} is only in the driver root {state.root.path}, and the kernel's "
            f"firmware search path (/sys/module/firmware_class/parameters/path) is {current}: the kernel "
            "cannot load it when a GPU is first opened",
            "boot with the kernel argument firmware_class.path=<host driver root, default /run/nvidia/driver>"
            "/lib/firmware (Talos: the Image Factory schematic's customization.extraKernelArgs, then upgrade the "
            "node to that installer), or let init write the parameter (a privileged pod with /sys/module "
            "writable)",
        )
    ]


def _firmware_fix(state: HostState) -> str:
    fix = (
        "ship it in the image under /lib/firmware (the GSP firmware of the same driver version) "
        "so that `init` publishes it"
    )
    if state.platform.name != "talos":
        return fix
    # The loader is built in (CONFIG_FW_LOADER=y), so its search path is the kernel argument
    # firmware_class.path= (drivers/base/firmware_loader/main.c); init writes the runtime parameter too,
    # but that is lost at reboot and read-only under SELinux enforcing (docs/talos.md). Talos takes kernel
    # arguments from its boot assets (machine.install.extraKernelArgs is deprecated: node/firmware.py).
    return (
        fix + "; on Talos also make the search path persistent with the kernel argument "
        "firmware_class.path=<host driver root>/lib/firmware (the Image Factory schematic's "
        "customization.extraKernelArgs, then upgrade the node to that installer)"
    )
