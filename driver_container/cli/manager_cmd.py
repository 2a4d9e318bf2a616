"""``driver-manager``: a drop-in for the operator's k8s-driver-manager init container, Talos-aware.

The operator runs ``driver-manager uninstall_driver`` with the stock environment (NODE_NAME,
OPERATOR_NAMESPACE, DRIVER_CONFIG_DIGEST, FORCE_REINSTALL, ENABLE_GPU_POD_EVICTION, ENABLE_AUTO_DRAIN,
DRAIN_*, KUBECONFIG; NVIDIA/k8s-driver-manager cmd/driver-manager/main.go @ bd62ca7d, docs/manager.md).
Host paths use the same variables as
``nvidia-driver`` (HostPaths.from_env).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer

from driver_container import logs
from driver_container.base.errors import DriverContainerError, UsageError
from driver_container.base.paths import HostPaths
from driver_container.cli import die_of_sigint, report_error, report_unexpected, sigint_as_sigterm
from driver_container.cli.about import version_option
from driver_container.kube.client import KubeClient
from driver_container.kube.endpoint import KubeConfig, namespace_of_service_account
from driver_container.manager import manager, remove
from driver_container.manager.manager import ManagerOptions
from driver_container.runtime.runner import Runner
from driver_container.settings import Settings, parse_bool, parse_seconds

app = typer.Typer(
    name="driver-manager",
    help="Talos-aware replacement for NVIDIA's k8s-driver-manager (gpu-operator init container).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

log = logging.getLogger(__name__)

# Stock variables that only steer module unloading and node draining; modules are never unloaded on
# Talos, so they are accepted and reported as having no effect there (docs/manager.md, "Deliberate differences").
IGNORED_ON_TALOS = (
    "ENABLE_GPU_POD_EVICTION",
    "ENABLE_AUTO_DRAIN",
    "DRAIN_USE_FORCE",
    "DRAIN_POD_SELECTOR_LABEL",
    "DRAIN_TIMEOUT_SECONDS",
    "DRAIN_DELETE_EMPTYDIR_DATA",
)
# The stock manager waits (without a bound) for MOFED when GPU_DIRECT_RDMA_ENABLED and a Mellanox device
# is present (k8s-driver-manager v0.12.0 waitForMofedDriver). Talos has no MOFED and nvidia_peermem
# cannot load there, so that wait would never end: it is left out, with a warning.
NO_MOFED_WAIT = ("GPU_DIRECT_RDMA_ENABLED", "USE_HOST_MOFED")
# Variables this command reads besides HostPaths' and Settings' (checked by tests/unit/project/test_manifests.py).
ENV_NAMES = (
    "NODE_NAME",
    "POD_NAME",  # with HOSTNAME: this pod, named by the node's verdict (kube/ownpod.py)
    "HOSTNAME",
    "OPERATOR_NAMESPACE",
    "DRIVER_CONFIG_DIGEST",
    "FORCE_REINSTALL",
    "KUBECONFIG",
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
    "HOST_DRIVER_DELAY",
    "OPERAND_WAIT_TIMEOUT",
    "NODE_LABEL_FOR_GPU_POD_EVICTION",
    "LOG_FORMAT",
    "VERBOSE",
    *IGNORED_ON_TALOS,
    *NO_MOFED_WAIT,
)


@app.callback()
def configure(
    log_format: Annotated[logs.LogFormat, typer.Option(envvar="LOG_FORMAT", help=logs.LOG_FORMAT_HELP)] = (
        logs.LogFormat.human
    ),
    verbose: Annotated[bool, typer.Option("--verbose", "-v", envvar="VERBOSE")] = False,
    version: Annotated[bool, version_option("driver-manager")] = False,
) -> None:

    logs.configure(json_format=log_format is logs.LogFormat.json, verbose=verbose)


def _options(env: dict[str, str]) -> ManagerOptions:

    node = env.get("NODE_NAME", "").strip()
    if not node:
        raise UsageError(
            "NODE_NAME is not set",
            name="NODE_NAME",
            fix="set NODE_NAME from the downward API (fieldRef spec.nodeName)",
        )
    namespace = (
        env.get("OPERATOR_NAMESPACE", "").strip() or namespace_of_service_account(KubeConfig()) or "gpu-operator"
    )
    return ManagerOptions(
        node_name=node,
        operator_namespace=namespace,
        driver_config_digest=(env.get("DRIVER_CONFIG_DIGEST") or "").strip() or None,
        force_reinstall=parse_bool("FORCE_REINSTALL", env.get("FORCE_REINSTALL"), False),
        host_driver_delay=parse_seconds("HOST_DRIVER_DELAY", env.get("HOST_DRIVER_DELAY"), 60.0),
        pod_wait_timeout=parse_seconds("OPERAND_WAIT_TIMEOUT", env.get("OPERAND_WAIT_TIMEOUT"), 300.0),
        custom_operand_label=(env.get("NODE_LABEL_FOR_GPU_POD_EVICTION") or "").strip() or None,
    )


def _warn_about_unused(env: dict[str, str]) -> None:

    set_ignored = [name for name in IGNORED_ON_TALOS if env.get(name)]
    if set_ignored:
        log.info(
            "%s: no effect on Talos (modules are never unloaded, so GPU pods need no eviction)", ", ".join(set_ignored)
        )
    if parse_bool("GPU_DIRECT_RDMA_ENABLED", env.get("GPU_DIRECT_RDMA_ENABLED"), False):
        log.warning(
            "GPU_DIRECT_RDMA_ENABLED=true: not waiting for MOFED (Talos has none and nvidia_peermem cannot load "
            "there); GPUDirect RDMA on Talos uses DMA-BUF"
        )
    for line in Settings.from_env(env).unused_lines():
        log.warning("%s", line)


@app.command("uninstall_driver")
def uninstall_driver() -> None:
    """Prepare the node for the driver container (never unloads a module on Talos)."""

    env = dict(os.environ)
    options = _options(env)
    clients: list[KubeClient] = []

    def api_factory() -> KubeClient:
        clients.append(KubeClient.from_env(env))
        return clients[-1]

    _warn_about_unused(env)
    try:
        summary = manager.run_uninstall(
            HostPaths.from_env(env), Settings.from_env(env), options, runner=Runner(), api_factory=api_factory
        )
    finally:
        for client in clients:
            client.close()
    typer.echo(f"driver-manager: {summary}")


@app.command("uninstall")
def uninstall() -> None:
    """Removing this project from a node: unmount DRIVER_ROOT (its tmpfs and the mounts below it) and
    remove the node's nvidia-driver-container/* annotations. Idempotent; never unloads a module."""

    env = dict(os.environ)
    typer.echo(f"driver-manager: {remove.run_remove(HostPaths.from_env(env), Runner(), env)}")


@app.command("preflight_check")
def preflight_check() -> None:
    """Read-only: platform, pre-installed host driver, loaded module vs image userspace, module files
    under /host. Exit 1 with the reason when uninstall_driver or init would refuse; no API calls."""

    env = dict(os.environ)
    _warn_about_unused(env)
    for line in manager.run_preflight(HostPaths.from_env(env), Settings.from_env(env)):
        typer.echo(f"driver-manager: preflight: {line}")
    typer.echo("driver-manager: preflight checks passed (platform, host driver, versions, module files)")


def main(argv: list[str] | None = None) -> None:
    try:
        if argv is None:  # the console script (see driver_container.cli.main)
            sigint_as_sigterm()
        app(args=argv)
    except DriverContainerError as exc:
        sys.exit(report_error(exc, "driver-manager"))
    except Exception as exc:  # see driver_container.cli.main
        sys.exit(report_unexpected(exc, "driver-manager"))
    except KeyboardInterrupt:
        if argv is not None:
            raise
        die_of_sigint()
