"""Cross-checks of a ``HostState``: pure, state in, findings out. Codes are stable (docs/troubleshooting.md).

Why the version checks are errors: nvidia-container-cli mounts only libraries whose file name ends with
the loaded module's version, and NVML refuses a kernel module of another version ("Driver/library version
mismatch"), so every GPU pod would fail later; refusing here names the cause once.

``modules`` checks the NVIDIA modules themselves, ``pod`` what driver-manager learned of the pod,
``gpus`` the GPUs on the PCI bus against them, ``host``
what is around them; ``model`` holds ``Finding``. The names below are the package's interface (callers
import them from here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver_container.findings.coherent import coherent_memory
from driver_container.findings.gpus import gpu_flavour, reconcile
from driver_container.findings.host import (
    PUBLISH_OUTCOMES,
    driver_root_proc_sys,
    driver_root_usability,
    environment,
    fabric,
    parameters,
)
from driver_container.findings.model import SEVERITIES, Finding, has_errors, talos_module_snippet, values_equal
from driver_container.findings.modules import (
    architecture,
    file_checks,
    flavour,
    loaded_version,
    loaded_version_of,
    module_presence,
    version_fix,
    versions,
    versions_mismatch,
)
from driver_container.findings.operator import PEERMEM_ON_TALOS_FIX, companion_modules
from driver_container.findings.pod import pod_findings

if TYPE_CHECKING:
    from driver_container.inspect.hoststate import HostState

__all__ = [
    "PEERMEM_ON_TALOS_FIX",
    "PUBLISH_OUTCOMES",
    "SEVERITIES",
    "Finding",
    "check",
    "has_errors",
    "loaded_version",
    "loaded_version_of",
    "talos_module_snippet",
    "values_equal",
    "version_fix",
    "versions_mismatch",
]


def check(state: HostState) -> list[Finding]:
    """Every finding for ``state``, errors first, in a stable order."""
    findings = module_presence(state) + companion_modules(state) + versions(state) + flavour(state)
    findings += pod_findings(state, any(f.code == "VERSION_MISMATCH" for f in findings))
    findings += architecture(state)
    for name, module in state.modules.items():
        findings += file_checks(state, module, state.module_files.get(name))
    findings += parameters(state) + environment(state) + fabric(state) + driver_root_usability(state.root)
    findings += driver_root_proc_sys(state) + coherent_memory(state, loaded_version(state))
    gpus = gpu_flavour(state)
    return sorted(reconcile(state, findings, gpus) + gpus, key=lambda f: SEVERITIES.index(f.severity))
