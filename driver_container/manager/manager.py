"""The Talos-aware driver manager: what the operator's init container must do before the driver starts.

NVIDIA's k8s-driver-manager (``uninstall_driver``) unloads the modules whenever the driver config digest
changed; on Talos the pod has no CAP_SYS_MODULE and /run is empty after every reboot, so it crash-loops
forever (docs/manager.md; NVIDIA/k8s-driver-manager cmd/driver-manager/main.go @ bd62ca7d). Here the
modules belong to Talos: this manager never touches them. It keeps the rest of the stock contract: a host
driver disables the driver pod on the node, operands are paused across a driver change so they restart
against the new root, and leftovers of a previous driver container (a mount at the driver root, the pid
file) go.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from driver_container.base.errors import (
    DriverContainerError,
    HostDriverPresentError,
    KubernetesError,
    VerificationError,
)
from driver_container.base.paths import HostPaths
from driver_container.base.resolver import Root
from driver_container.findings import check
from driver_container.inspect import verdict
from driver_container.inspect.hoststate import HostState, inspect_host
from driver_container.manager import handoff, heal, verdicts
from driver_container.manager.facts import NodeFacts, gather_facts, version_note
from driver_container.manager.labels import (
    CLIENT_LABEL,
    DRA_DRIVER_LABEL,
    DRA_PLUGIN_APP,
    DRIVER_DEPLOY_LABEL,
    PAUSED,
    PRE_INSTALLED,
    client_pods,
    operand_selector,
    pause_patch,
    paused_value,
    relabel_command,
    restore_patch,
)
from driver_container.runtime.runner import MODULE_TOOLS, Runner
from driver_container.settings import Cluster, Settings
from driver_container.settings.variables import BY_NAME, DEFAULT_OPERATOR_NAMESPACE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ManagerOptions:
    node_name: str
    # The defaults are the variables' (settings/variables.py); the CLI builds these from them.
    operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE
    driver_config_digest: str | None = None
    force_reinstall: bool = False
    host_driver_delay: float = float(BY_NAME["HOST_DRIVER_DELAY"].default)  # stock: 60 s, then fail
    pod_wait_timeout: float = float(BY_NAME["OPERAND_WAIT_TIMEOUT"].default)  # stock: 5 minutes per operand
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


# -- the command ----------------------------------------------------------------------------------


def _make_verdict(proc: Root, state: HostState, checks: tuple[str, ...], digest: str | None) -> verdict.Verdict:
    """The verdict of a host inspection made with the host root (driver-manager's view); ``checks``: the
    "CODE: message" of its FILE_FINDINGS."""
    binding = verdict.current_binding(proc, digest, state.userspace.version, state.kernel_release)
    return verdict.Verdict(binding, dict(state.module_files), checks)


def hand_verdict_to_init(
    paths: HostPaths, settings: Settings, digest: str | None, state: HostState | None = None
) -> str:
    """Leave the module files read through /host (only this init container has it) for ``init`` in
    RUN_DIR (verdict.py); ``state``: the inspection already made (``NodeFacts.host``), else one is made.
    Never fatal: without a verdict ``init`` only verifies less."""
    try:
        state = state if state is not None else inspect_host(paths, settings)
    except DriverContainerError as exc:
        log.warning("module files not read, no verdict for init: %s", exc.message)
        handoff.remove_verdict(paths.run_dir)
        return "module-file verdict NOT written"
    if state.module_files_source != "host" or not state.module_files:
        handoff.remove_verdict(paths.run_dir)
        return (
            f"no NVIDIA module files under {paths.host_root} (the host's {paths.host_rootfs}): "
            "no module-file verdict for init"
        )
    found = check(state)
    checks = tuple(f"{f.code}: {f.message}" for f in found if f.code in verdict.FILE_FINDINGS)
    made = _make_verdict(paths.proc, state, checks, digest)
    for line in made.findings:
        log.warning("module files: %s", line)
    try:
        handoff.write_verdict(paths.run_dir, made)
    except (DriverContainerError, OSError) as exc:
        log.warning("cannot leave the module-file verdict for init: %s", exc)
        return "module-file verdict NOT written"
    file_errors = [f for f in found if f.severity == "error" and f.code in verdict.FILE_FINDINGS]
    outcome = "mismatch, init will refuse" if file_errors else "match"
    return f"module-file verdict for init: {outcome} ({len(made.module_files)} file(s))"


def disable_container_driver(
    api: NodeApi, options: ManagerOptions, cluster: Cluster, facts: NodeFacts, sleep: Callable[[float], None]
) -> None:
    log.warning(
        "the host provides NVIDIA userspace (%s exists and is executable): the driver is pre-installed, "
        "most likely by the Talos nvidia-container-toolkit extension; labelling node %s %s=%s so the operator "
        "stops running the driver container here (the label stays after the extension is removed: then run `%s`)",
        facts.host_smi,
        options.node_name,
        DRIVER_DEPLOY_LABEL,
        PRE_INSTALLED,
        relabel_command(options.node_name),
    )
    api.patch_node_labels(options.node_name, {DRIVER_DEPLOY_LABEL: PRE_INSTALLED})
    verdicts.mark_pre_installed(cluster, options.node_name, facts.host_smi)  # no longer ready (never fatal)
    sleep(options.host_driver_delay)  # stock behaviour: give the operator time to delete this pod
    raise HostDriverPresentError(
        f"host nvidia-smi {facts.host_smi} found: the node has a pre-installed driver; "
        f"node {options.node_name} labelled {DRIVER_DEPLOY_LABEL}={PRE_INSTALLED}",
        path=facts.host_smi,
        fix="to use this driver container, remove the NVIDIA userspace (nvidia-container-toolkit) extension "
        f"and keep only the kmod extension (docs/talos.md), then run `{relabel_command(options.node_name)}`: "
        "gpu-operator never replaces the pre-installed label itself",
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
        resource="pods",
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
    verdicts.mark_pending(settings.cluster)  # before anything else: an earlier pod's ready must not stand (never fatal)
    runner = runner.forbid(MODULE_TOOLS)  # Talos owns the modules: no code path may unload one
    api = api_factory()
    heal.heal_stale_pod(api, options, settings.cluster.pod_name, facts, paths, sleep=sleep)  # a stale pod goes
    if facts.host_smi is not None:
        disable_container_driver(api, options, settings.cluster, facts, sleep)
    note = version_note(facts)
    if note:
        log.info("%s", note)
    verdict_note = hand_verdict_to_init(paths, settings, options.driver_config_digest, facts.host)
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
    facts = facts or gather_facts(paths, settings)
    if facts.platform != "talos":
        return [f"not a Talos node ({facts.platform_evidence}): nothing to check for this image"]
    lines = [f"Talos {facts.talos_version or '?'} ({facts.platform_evidence})"]
    if facts.host_smi is not None:
        raise HostDriverPresentError(
            f"host nvidia-smi {facts.host_smi} found: uninstall_driver would label the node "
            f"{DRIVER_DEPLOY_LABEL}={PRE_INSTALLED}",
            path=facts.host_smi,
            fix="remove the NVIDIA userspace (nvidia-container-toolkit) extension, keep only the kmod extension; "
            f"on a node already labelled {PRE_INSTALLED}, then run `{relabel_command('<node>')}`",
        )
    lines.append("no host NVIDIA userspace (the driver container is wanted here)")
    note = version_note(facts)
    if note:
        lines.append(note)
    elif facts.nvidia_loaded:
        lines.append(f"loaded nvidia {facts.nvidia_version} = image userspace {facts.image_version}")
    else:
        lines.append("nvidia not loaded yet: versions checked by init once Talos loads it")
    state = facts.host
    errors = [
        f for f in check(state) if f.severity == "error" and f.code in ("MODULE_FILE_MISMATCH", "VERMAGIC_MISMATCH")
    ]
    if errors:
        raise VerificationError(
            "; ".join(f"{f.code}: {f.message}" for f in errors),
            codes=tuple(f.code for f in errors),
            fix="; ".join(dict.fromkeys(f.fix for f in errors)),
        )
    files = ", ".join(str(f.path) for f in state.module_files.values()) or f"none under {paths.host_root}"
    lines.append(f"module files match the loaded modules ({files})")
    return lines
