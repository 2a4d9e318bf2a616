"""The Talos-aware driver manager: what the operator's init container must do before the driver starts.

NVIDIA's k8s-driver-manager (``uninstall_driver``) unloads the modules whenever the driver config
digest changed; on Talos the pod has no CAP_SYS_MODULE and /run is empty after every reboot, so it
crash-loops forever (gpu-operator-contract.md section 4). Here the modules belong to Talos: this
manager never touches them. It keeps the rest of the stock contract: a host driver disables the
driver pod on the node, operands are paused across a driver change so they restart against the new
root, and leftovers of a previous driver container (a mount at the driver root, the pid file) go.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Protocol

from driver_container.errors import (
    DriverContainerError,
    HostDriverPresentError,
    HostReadError,
    KubernetesError,
    VerificationError,
)
from driver_container.formats.kernel.mountinfo import mounts_at_or_below, parse_mountinfo, top_mount_at
from driver_container.formats.numbers import parse_uint
from driver_container.node.rootmount import is_ours
from driver_container.paths import HostPaths, Root
from driver_container.runtime.runner import MODULE_TOOLS, Runner
from driver_container.settings import Settings

log = logging.getLogger(__name__)

PAUSED = "paused-for-driver-upgrade"  # value the stock manager and upgrade controller use
DRIVER_DEPLOY_LABEL = "nvidia.com/gpu.deploy.driver"
PRE_INSTALLED = "pre-installed"  # the operator stops scheduling its driver pod on such a node
# Operand deploy label -> ``app`` label of its pods whose end is waited for (None: paused, not waited for).
# The stock manager's lists, NVIDIA/k8s-driver-manager v0.12.0 (bd62ca7d) cmd/driver-manager/main.go
# fetchCurrentLabels, evictAllGPUOperatorComponents and waitForPodsToTerminate.
CLIENT_LABEL = "nvidia.com/gpu.deploy.client"  # user GPU clients: their DaemonSets select on this key
DRA_DRIVER_LABEL = "nvidia.com/gpu.deploy.dra-driver"  # the DRA kubelet plugin: paused last (evictKubeletPlugin)
DRA_PLUGIN_APP = "nvidia-dra-driver-kubelet-plugin"
OPERANDS: dict[str, str | None] = {
    "nvidia.com/gpu.deploy.operator-validator": "nvidia-operator-validator",
    "nvidia.com/gpu.deploy.container-toolkit": "nvidia-container-toolkit-daemonset",
    "nvidia.com/gpu.deploy.device-plugin": "nvidia-device-plugin-daemonset",
    "nvidia.com/gpu.deploy.gpu-feature-discovery": "gpu-feature-discovery",
    "nvidia.com/gpu.deploy.dcgm-exporter": "nvidia-dcgm-exporter",
    "nvidia.com/gpu.deploy.dcgm": "nvidia-dcgm",
    "nvidia.com/gpu.deploy.mig-manager": "nvidia-mig-manager",
    "nvidia.com/gpu.deploy.nvsm": None,
    "nvidia.com/gpu.deploy.sandbox-validator": "nvidia-sandbox-validator",
    "nvidia.com/gpu.deploy.sandbox-device-plugin": "nvidia-sandbox-device-plugin-daemonset",
    "nvidia.com/gpu.deploy.vgpu-device-manager": "nvidia-vgpu-device-manager",
    "nvidia.com/gpu.deploy.dra-validator": None,
    "nvidia.com/gpu.deploy.dcgm-exporter-dra": "nvidia-dcgm-exporter-dra",
    "nvidia.com/gpu.deploy.dcgm-dra": "nvidia-dcgm-dra",
    CLIENT_LABEL: None,  # waited for by nodeSelector key (client_pods), as the stock manager does
}
# The validator's host-driver probe: a regular executable nvidia-smi in these host directories
# (cmd/nvidia-validator, gpu-operator-contract.md section 5). In-root paths, resolved through Root.
HOST_SMI_DIRS = ("/usr/bin", "/usr/sbin", "/bin", "/sbin", "/opt/bin")


@dataclass(frozen=True)
class ManagerOptions:
    node_name: str
    operator_namespace: str = "gpu-operator"  # stock default of OPERATOR_NAMESPACE
    driver_config_digest: str | None = None
    force_reinstall: bool = False
    host_driver_delay: float = 60.0  # stock: sleep 60 s before failing, while the pod is replaced
    pod_wait_timeout: float = 300.0  # stock grace period per operand: 5 minutes
    poll_interval: float = 5.0
    custom_operand_label: str | None = None  # NODE_LABEL_FOR_GPU_POD_EVICTION: paused and restored too


class NodeApi(Protocol):
    """The calls of ``kube.KubeClient`` the manager uses (tests pass an in-memory fake)."""

    def node_labels(self, name: str) -> dict[str, str]: ...

    def patch_node_labels(self, name: str, labels: Mapping[str, str | None]) -> dict[str, str]: ...

    def list_pods(self, namespace: str | None, *, node: str, label_selector: str = "") -> list[dict[str, Any]]: ...

    def wait_for_pods_gone(
        self, namespace: str | None, *, node: str, label_selector: str, timeout: float, poll: float = 5.0
    ) -> None: ...


@dataclass(frozen=True)
class NodeFacts:
    platform: str  # "talos" | "generic"
    platform_evidence: str
    talos_version: str | None
    host_smi: PurePosixPath | None  # host nvidia-smi found by the validator's rule
    nvidia_version: str | None  # version of the loaded nvidia module; None when not loaded
    nvidia_loaded: bool
    image_version: str | None  # NVIDIA userspace version in this image
    state_digest: str | None  # RUN_DIR/nvidia-driver.state
    driver_mounts: tuple[str, ...]  # mount points at or below DRIVER_ROOT, unless ours is on top there
    pid_file_stale: bool  # pid file present and its process gone


# -- pure helpers ---------------------------------------------------------------------------------


def paused_value(value: str) -> str:
    """The stock manager's rule: true -> paused; false stays; other values get the suffix once."""
    if value in ("true", PAUSED):
        return PAUSED
    if value == "false" or PAUSED in value:
        return value
    return f"{value}_{PAUSED}"


def restored_value(value: str) -> str:
    if value == PAUSED:
        return "true"
    return value.replace(f"_{PAUSED}", "").replace(PAUSED, "").strip("_")


def pause_patch(labels: Mapping[str, str], extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Operand labels (and ``extra`` ones: the custom eviction label) to pause; the DRA plugin comes later."""
    keys = set(OPERANDS) | set(extra)
    return {k: paused_value(v) for k, v in labels.items() if k in keys and paused_value(v) != v}


def restore_patch(labels: Mapping[str, str], extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Undo our pause, including one left behind by an interrupted earlier run."""
    keys = {*OPERANDS, DRA_DRIVER_LABEL, *extra}
    return {k: restored_value(v) for k, v in labels.items() if k in keys and PAUSED in v}


def client_pods(pods: list[dict[str, Any]], key: str = CLIENT_LABEL) -> list[str]:
    """Names of DaemonSet pods whose nodeSelector uses ``key`` (the stock WaitForPodsWithNodeSelector rule,
    k8s-driver-manager v0.12.0 internal/kubernetes/client.go)."""
    names = []
    for pod in pods:
        owners = pod.get("metadata", {}).get("ownerReferences") or []
        by_daemonset = any(o.get("controller") and o.get("kind") == "DaemonSet" for o in owners)
        if by_daemonset and key in (pod.get("spec", {}).get("nodeSelector") or {}):
            names.append(str(pod["metadata"].get("name", "?")))
    return names


def operand_selector(*more: str) -> str:
    apps = sorted({app for app in OPERANDS.values() if app} | set(more))
    return f"app in ({','.join(apps)})"


def find_host_smi(host: Root) -> PurePosixPath | None:
    for directory in HOST_SMI_DIRS:
        inner = PurePosixPath(directory) / "nvidia-smi"
        st = host.stat(inner)  # follows links inside the host root, as chroot would
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
            return inner
    return None


def leftover_mounts(mountinfo: str, driver_root: str) -> tuple[str, ...]:
    """Mounts a previous driver container left at or below DRIVER_ROOT; none when the visible mount there
    is init's own exec-capable tmpfs (node/rootmount.py), which must outlive every container."""
    top = top_mount_at(parse_mountinfo(mountinfo), driver_root.rstrip("/") or "/")
    return () if top is not None and is_ours(top) else mounts_at_or_below(mountinfo, driver_root)


# -- reading the node -----------------------------------------------------------------------------


def _pid_file_stale(paths: HostPaths) -> bool:
    """True when a pid file is there and no live init holds it. init creates it as a regular file with
    O_NOFOLLOW (lock.py), so anything else at that name (a symlink, e.g. to /dev/zero, a FIFO) is no
    lock of ours: stale, and removed as a name. The read goes through Root: non-blocking, regular file,
    64 bytes at most."""
    name = paths.pid_file.name
    st = paths.run.lstat(name)
    if st is None:
        return False
    if not stat.S_ISREG(st.st_mode):
        log.warning("%s is not a regular file (mode %o): treated as stale", paths.pid_file, st.st_mode)
        return True
    try:
        text = paths.run.read_text(name, limit=64).strip()
    except HostReadError as exc:
        log.warning("%s", exc.message)
        return False
    # The driver pod runs with hostPID (0500_daemonset.yaml), so the pid is a host pid visible in /proc.
    pid = parse_uint(text)
    return not (pid is not None and paths.proc.is_dir(str(pid)))


def gather_facts(paths: HostPaths, settings: Settings) -> NodeFacts:
    from driver_container.inspect.hoststate import read_loaded_modules
    from driver_container.inspect.platform import detect_platform
    from driver_container.inspect.userspace import find_userspace

    platform = detect_platform(paths, settings.driver_platform)
    nvidia = read_loaded_modules(paths).get("nvidia")
    loaded = nvidia is not None and nvidia.loaded
    mountinfo = paths.proc.read_text_or_none("self/mountinfo") or ""
    state = paths.run.read_text_or_none(paths.state_file.name)
    return NodeFacts(
        platform=platform.name,
        platform_evidence=platform.evidence,
        talos_version=platform.talos_version,
        host_smi=find_host_smi(paths.host),
        nvidia_version=nvidia.version if nvidia is not None and loaded else None,
        nvidia_loaded=loaded,
        image_version=find_userspace(paths).version if loaded else None,
        state_digest=state.strip() if state is not None else None,
        driver_mounts=leftover_mounts(mountinfo, str(paths.driver_root)),
        pid_file_stale=_pid_file_stale(paths),
    )


# -- the command ----------------------------------------------------------------------------------


def check_versions(facts: NodeFacts) -> None:
    if not facts.nvidia_version or not facts.image_version or facts.nvidia_version == facts.image_version:
        return
    talos = facts.talos_version or "<Talos version>"
    raise VerificationError(
        f"the loaded nvidia module is version {facts.nvidia_version} but this image ships NVIDIA userspace "
        f"{facts.image_version}; they must be identical",
        fix=f"use the driver image {facts.nvidia_version}-talos{talos} (driver.version), or install the Talos "
        f"kmod extension of version {facts.image_version} and reboot (docs/talos.md)",
    )


def hand_verdict_to_init(paths: HostPaths, settings: Settings, digest: str | None) -> str:
    """Read the module files through /host (only this init container has it) and leave the facts for
    ``init`` in RUN_DIR (verdict.py). Never fatal: without a verdict ``init`` only verifies less."""
    from driver_container.inspect import verdict
    from driver_container.inspect.hoststate import inspect_host

    try:
        state = inspect_host(paths, settings)
    except DriverContainerError as exc:
        log.warning("module files not read, no verdict for init: %s", exc.message)
        verdict.remove_verdict(paths)
        return "module-file verdict NOT written"
    if state.module_files_source != "host" or not state.module_files:
        verdict.remove_verdict(paths)
        return f"no NVIDIA module files under {paths.host_root}: no module-file verdict for init"
    made = verdict.make_verdict(paths, state, digest)
    for line in made.findings:
        log.warning("module files: %s", line)
    try:
        verdict.write_verdict(paths, made)
    except (DriverContainerError, OSError) as exc:
        log.warning("cannot leave the module-file verdict for init: %s", exc)
        return "module-file verdict NOT written"
    file_errors = [f for f in state.findings if f.severity == "error" and f.code in verdict.FILE_FINDINGS]
    outcome = "mismatch, init will refuse" if file_errors else "match"
    return f"module-file verdict for init: {outcome} ({len(made.module_files)} file(s))"


def disable_container_driver(
    api: NodeApi, options: ManagerOptions, facts: NodeFacts, sleep: Callable[[float], None]
) -> None:
    log.warning(
        "the host provides NVIDIA userspace (%s exists and is executable): the driver is pre-installed, "
        "most likely by the Talos nvidia-container-toolkit extension; labelling node %s %s=%s so the operator "
        "stops running the driver container here",
        facts.host_smi,
        options.node_name,
        DRIVER_DEPLOY_LABEL,
        PRE_INSTALLED,
    )
    api.patch_node_labels(options.node_name, {DRIVER_DEPLOY_LABEL: PRE_INSTALLED})
    sleep(options.host_driver_delay)  # stock behaviour: give the operator time to delete this pod
    raise HostDriverPresentError(
        f"host nvidia-smi {facts.host_smi} found: the node has a pre-installed driver; "
        f"node {options.node_name} labelled {DRIVER_DEPLOY_LABEL}={PRE_INSTALLED}",
        fix="to use this driver container, remove the NVIDIA userspace (nvidia-container-toolkit) extension "
        "and keep only the kmod extension (docs/talos.md)",
    )


def clean_leftovers(paths: HostPaths, facts: NodeFacts, runner: Runner) -> list[str]:
    done: list[str] = []
    if facts.driver_mounts:
        # A stale rbind of a previous (stock) driver container: lazy and recursive, as NVIDIA's script does.
        runner.run(["umount", "-l", "-R", str(paths.driver_root)])
        done.append(f"unmounted {paths.driver_root}")
    if facts.pid_file_stale:
        try:
            os.unlink(paths.pid_file)
            done.append(f"removed stale {paths.pid_file}")
        except FileNotFoundError:
            pass
    return done


def _pause_needed(api: NodeApi, options: ManagerOptions, facts: NodeFacts) -> bool:
    digest = options.driver_config_digest
    changed = options.force_reinstall or digest is None or facts.state_digest != digest
    if not (facts.nvidia_loaded and changed):
        return False
    selector = operand_selector(DRA_PLUGIN_APP)
    running = api.list_pods(options.operator_namespace, node=options.node_name, label_selector=selector)
    return bool(running)


def _wait_for_operands(api: NodeApi, options: ManagerOptions, sleep: Callable[[float], None]) -> None:
    """Operand pods by app label, then GPU-client DaemonSet pods in every namespace by nodeSelector key."""
    node, timeout, poll = options.node_name, options.pod_wait_timeout, options.poll_interval
    api.wait_for_pods_gone(
        options.operator_namespace, node=node, label_selector=operand_selector(), timeout=timeout, poll=poll
    )
    for _ in range(max(1, int(timeout / poll) if poll > 0 else 1) + 1):
        names = client_pods(api.list_pods(None, node=node))
        if not names:
            return
        log.info("waiting for GPU client pod(s) %s (nodeSelector %s) to end", ", ".join(names), CLIENT_LABEL)
        sleep(poll)
    raise KubernetesError(
        f"GPU client pods {', '.join(names)} (nodeSelector {CLIENT_LABEL}) still on node {node} after {timeout:g} s",
        fix="check why they do not terminate (kubectl describe pod), then restart the driver pod",
    )


def _pause_dra_plugin(api: NodeApi, options: ManagerOptions, labels: Mapping[str, str]) -> bool:
    """The DRA kubelet plugin goes last: it unprepares the claims of the pods paused before it."""
    value = labels.get(DRA_DRIVER_LABEL)
    if value is None or paused_value(value) == value:
        return False
    log.info("pausing the DRA kubelet plugin (%s), after its claim holders", DRA_DRIVER_LABEL)
    api.patch_node_labels(options.node_name, {DRA_DRIVER_LABEL: paused_value(value)})
    api.wait_for_pods_gone(
        options.operator_namespace,
        node=options.node_name,
        label_selector=f"app={DRA_PLUGIN_APP}",
        timeout=options.pod_wait_timeout,
        poll=options.poll_interval,
    )
    return True


def run_uninstall(
    paths: HostPaths,
    settings: Settings,
    options: ManagerOptions,
    *,
    runner: Runner,
    api_factory: Callable[[], NodeApi],
    sleep: Callable[[float], None] = time.sleep,
    facts: NodeFacts | None = None,
) -> str:
    """``driver-manager uninstall_driver`` on Talos; returns a one-line summary for the CLI."""
    facts = facts or gather_facts(paths, settings)
    if facts.platform != "talos":
        return f"not a Talos node ({facts.platform_evidence}): the stock k8s-driver-manager applies here; nothing to do"
    runner = runner.forbid(MODULE_TOOLS)  # Talos owns the modules: no code path may unload one
    api = api_factory()
    if facts.host_smi is not None:
        disable_container_driver(api, options, facts, sleep)
    check_versions(facts)
    verdict_note = hand_verdict_to_init(paths, settings, options.driver_config_digest)
    extra = (options.custom_operand_label,) if options.custom_operand_label else ()
    labels = api.node_labels(options.node_name) if _pause_needed(api, options, facts) else {}
    pause = pause_patch(labels, extra)
    try:
        if pause:
            log.info(
                "driver config changed (%s -> %s): pausing operands %s",
                facts.state_digest,
                options.driver_config_digest,
                ", ".join(sorted(pause)),
            )
            api.patch_node_labels(options.node_name, dict(pause))
            _wait_for_operands(api, options, sleep)
        if _pause_dra_plugin(api, options, labels):
            pause[DRA_DRIVER_LABEL] = PAUSED
        done = clean_leftovers(paths, facts, runner)
    finally:
        restore = restore_patch(api.node_labels(options.node_name), extra)
        if restore:
            log.info("restoring operand labels %s", ", ".join(f"{k}={v}" for k, v in sorted(restore.items())))
            api.patch_node_labels(options.node_name, dict(restore))
    state = f"nvidia {facts.nvidia_version} loaded" if facts.nvidia_loaded else "nvidia not loaded yet (Talos loads it)"
    actions = ([f"paused {len(pause)} operand label(s)"] if pause else []) + done
    summary = "; ".join(actions) if actions else "nothing to clean"
    return f"Talos {facts.talos_version or ''}: {state}; {summary}; {verdict_note}"


def run_preflight(paths: HostPaths, settings: Settings, facts: NodeFacts | None = None) -> list[str]:
    """``preflight_check``: what ``uninstall_driver`` and ``init`` would refuse, read-only and without the
    API. The stock command checks nothing (k8s-driver-manager v0.12.0 preflightCheck only logs); this one
    checks the platform, a pre-installed host driver, the loaded module against the image's userspace,
    and the module files under /host against the loaded modules. Returns the lines of what passed."""
    from driver_container.inspect.hoststate import inspect_host

    facts = facts or gather_facts(paths, settings)
    if facts.platform != "talos":
        return [f"not a Talos node ({facts.platform_evidence}): nothing to check for this image"]
    lines = [f"Talos {facts.talos_version or '?'} ({facts.platform_evidence})"]
    if facts.host_smi is not None:
        raise HostDriverPresentError(
            f"host nvidia-smi {facts.host_smi} found: uninstall_driver would label the node "
            f"{DRIVER_DEPLOY_LABEL}={PRE_INSTALLED}",
            fix="remove the NVIDIA userspace (nvidia-container-toolkit) extension, keep only the kmod extension",
        )
    lines.append("no host NVIDIA userspace (the driver container is wanted here)")
    check_versions(facts)
    if facts.nvidia_loaded:
        lines.append(f"loaded nvidia {facts.nvidia_version} = image userspace {facts.image_version}")
    else:
        lines.append("nvidia not loaded yet: versions checked by init once Talos loads it")
    state = inspect_host(paths, settings)
    errors = [
        f for f in state.findings if f.severity == "error" and f.code in ("MODULE_FILE_MISMATCH", "VERMAGIC_MISMATCH")
    ]
    if errors:
        raise VerificationError(
            "; ".join(f"{f.code}: {f.message}" for f in errors), fix="; ".join(dict.fromkeys(f.fix for f in errors))
        )
    files = ", ".join(str(f.path) for f in state.module_files.values()) or f"none under {paths.host_root}"
    lines.append(f"module files match the loaded modules ({files})")
    return lines
