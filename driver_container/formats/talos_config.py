"""Talos machine-config text that makes machined load kernel modules: pure, version in, YAML text out.

Two forms exist (siderolabs/talos v1.14.0-rc.1, 7a84d742b3d53451cbaa1eb91d9b12403e80161c):
- ``machine.kernel.modules`` (pkg/machinery/config/types/v1alpha1/v1alpha1_types.go): accepted by every
  version, marked "Deprecated: Use multi-doc `KernelModuleConfig` instead" in 1.14;
- the ``KernelModuleConfig`` document (pkg/machinery/config/types/runtime/kernel_module.go, first tagged
  in v1.14.0-beta.0): ``apiVersion: v1alpha1``, ``kind: KernelModuleConfig``, ``name`` (required),
  ``parameters`` (``omitempty``, "changes applied after reboot").

The snippet fits the node's Talos version (os-release VERSION_ID): the document from 1.14 on, the legacy
key before, and the legacy key when the version is unknown (it works everywhere). It never names one
module both ways, and it has no ``parameters:`` key without parameters (an empty key is null, which the
JSON schema rejects).

The text is emitted by PyYAML's safe dumper, not by string formatting: a module parameter is any string
(``NVreg_RegistryDwords="a=1; b: 2"``), and YAML would read ``k: v`` in a plain scalar as a mapping and
`` #`` as the start of a comment. The dumper quotes exactly what needs quoting, so every name and value
reads back as the same string (tests/property/test_property_talos_config.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# ASCII digits only (``\d`` also takes Arabic-Indic ones), at most 20: int() of 4301+ digits raises.
_VERSION = re.compile(r"^v?([0-9]{1,20})\.([0-9]{1,20})(?:\.[0-9]+)?(?:-([0-9A-Za-z.]+))?$")
KERNEL_MODULE_CONFIG_SINCE = (1, 14)


def parse_talos_version(version: str | None) -> tuple[int, int, str] | None:
    """(major, minor, pre-release) of a VERSION_ID such as ``v1.14.0-beta.0``; None when not one."""
    match = _VERSION.match((version or "").strip())
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), match.group(3) or ""


def uses_kernel_module_config(version: str | None) -> bool:
    """True where the ``KernelModuleConfig`` document is the supported form (1.14.0-beta.0 and later)."""
    parsed = parse_talos_version(version)
    if parsed is None:
        return False
    major, minor, pre = parsed
    if (major, minor) != KERNEL_MODULE_CONFIG_SINCE:
        return (major, minor) > KERNEL_MODULE_CONFIG_SINCE
    return not pre.startswith("alpha")  # the document arrived in v1.14.0-beta.0


def module_config_snippet(modules: Sequence[tuple[str, Sequence[str]]], talos_version: str | None) -> str:
    """The text to add for ``modules`` ((name, parameters) pairs) on a node of ``talos_version``."""
    if uses_kernel_module_config(talos_version):
        documents = [{"apiVersion": "v1alpha1", "kind": "KernelModuleConfig", **_module(n, p)} for n, p in modules]
        return "\n---\n".join(_dump(d) for d in documents)
    return _dump({"machine": {"kernel": {"modules": [_module(n, p) for n, p in modules]}}})


def _module(name: str, params: Sequence[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": str(name)}
    if params:
        entry["parameters"] = [str(p) for p in params]
    return entry


def _dump(document: dict[str, Any]) -> str:
    """Block-style YAML in the keys' order, lists indented under their key as Talos's docs write them."""
    # Lazy, hot path: PyYAML's import costs ~10 ms, and only a fix text (a failure) needs it, never a healthy start.
    import yaml

    class IndentedDumper(yaml.SafeDumper):
        def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
            super().increase_indent(flow, False)

    # ASCII out (non-ASCII escaped in double quotes): PyYAML writes U+0085/U+2028/U+2029 raw when allowed
    # Unicode, and a YAML reader takes them for line breaks. No folding: a parameter stays on one line.
    text = yaml.dump(document, Dumper=IndentedDumper, default_flow_style=False, sort_keys=False, width=2**16)
    return text.rstrip("\n")


def snippet_heading(talos_version: str | None) -> str:
    """One line that says which form follows and why, for the fix texts."""
    if uses_kernel_module_config(talos_version):
        return (
            f"add these KernelModuleConfig documents to the machine config (Talos {talos_version}; "
            "replace any machine.kernel.modules entry of the same module, never both):"
        )
    where = f"Talos {talos_version}" if talos_version else "Talos version unknown; works in every version"
    return (
        f"add to the machine config ({where}; from Talos 1.14 a KernelModuleConfig document replaces it, never both):"
    )
