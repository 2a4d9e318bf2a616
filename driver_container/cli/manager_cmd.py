"""``driver-manager``: a drop-in for the operator's k8s-driver-manager init container, Talos-aware.

The operator runs ``driver-manager uninstall_driver`` with the stock environment (NODE_NAME,
OPERATOR_NAMESPACE, DRIVER_CONFIG_DIGEST, FORCE_REINSTALL, ENABLE_GPU_POD_EVICTION, ENABLE_AUTO_DRAIN,
DRAIN_*, KUBECONFIG; NVIDIA/k8s-driver-manager cmd/driver-manager/main.go @ bd62ca7d, docs/manager.md).
Host paths use the same variables as
``nvidia-driver`` (HostPaths); settings/variables.py declares every variable it reads.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from driver_container import logs
from driver_container.base.errors import DriverContainerError, UsageError
from driver_container.cli import die_of_sigint, report_error, report_unexpected, sigint_as_sigterm
from driver_container.cli.about import version_option
from driver_container.kube.client import KubeClient
from driver_container.kube.endpoint import operator_namespace
from driver_container.manager import manager, remove
from driver_container.manager.manager import ManagerOptions
from driver_container.runtime.runner import Runner
from driver_container.settings import Settings, variables
from driver_container.settings.resolve import ManagerKnobs, logging_of, manager_knobs, paths_of

app = typer.Typer(
    name="driver-manager",
    help="Talos-aware replacement for NVIDIA's k8s-driver-manager (gpu-operator init container).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

log = logging.getLogger(__name__)

# Variables this command reads besides HostPaths' and Settings' (settings/variables.py declares each, with
# the ones that only steer unloading and draining: no effect on Talos, where modules are never unloaded;
# checked against the manifests by tests/unit/project/test_manifests.py).
ENV_NAMES = (
    *variables.names("cluster", "manager", "logging"),
    "POD_NAME",  # with HOSTNAME: this pod, named by the node's verdict
    "HOSTNAME",
    "DRIVER_CONFIG_DIGEST",  # also a Settings knob: the module-file verdict is kept for the same digest only
    "GPU_DIRECT_RDMA_ENABLED",  # no MOFED wait on Talos: a warning instead
    "USE_HOST_MOFED",
)


@app.callback()
def configure(
    log_format: Annotated[logs.LogFormat | None, typer.Option(help=logs.LOG_FORMAT_HELP)] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help=logs.VERBOSE_HELP)] = False,
    version: Annotated[bool, version_option("driver-manager")] = False,
) -> None:
    # The logging variables are the reader's, as for nvidia-driver (cli/app.py); an explicit option wins.
    chosen = logging_of(None, {"LOG_FORMAT": log_format.value if log_format else None, "VERBOSE": verbose})
    logs.configure(json_format=chosen.json, verbose=chosen.verbose)


def _options(knobs: ManagerKnobs, settings: Settings) -> ManagerOptions:
    node_name = settings.cluster.node_name
    if node_name is None:
        raise UsageError(
            "NODE_NAME is not set",
            name="NODE_NAME",
            fix="set NODE_NAME from the downward API (fieldRef spec.nodeName)",
        )
    return ManagerOptions(
        node_name=node_name,
        operator_namespace=operator_namespace(settings.cluster),
        driver_config_digest=settings.driver_config_digest,
        force_reinstall=knobs.force_reinstall,
        host_driver_delay=knobs.host_driver_delay,
        pod_wait_timeout=knobs.pod_wait_timeout,
        custom_operand_label=knobs.custom_operand_label,
    )


def _warn_about_unused(knobs: ManagerKnobs, settings: Settings) -> None:
    if knobs.set_but_ignored:
        log.info(
            "%s: no effect on Talos (modules are never unloaded, so GPU pods need no eviction)",
            ", ".join(knobs.set_but_ignored),
        )
    # The stock manager waits (without a bound) for MOFED when GPU_DIRECT_RDMA_ENABLED and a Mellanox device
    # is present (k8s-driver-manager v0.12.0 waitForMofedDriver). Talos has no MOFED and nvidia_peermem
    # cannot load there, so that wait would never end: it is left out, with a warning.
    if settings.gpu_direct_rdma:
        log.warning(
            "GPU_DIRECT_RDMA_ENABLED=true: not waiting for MOFED (Talos has none and nvidia_peermem cannot load "
            "there); GPUDirect RDMA on Talos uses DMA-BUF"
        )
    for line in settings.unused_lines():
        log.warning("%s", line)


@app.command("uninstall_driver")
def uninstall_driver() -> None:
    """Prepare the node for the driver container (never unloads a module on Talos)."""

    knobs = manager_knobs()
    settings = Settings.from_env()
    options = _options(knobs, settings)
    clients: list[KubeClient] = []

    def api_factory() -> KubeClient:
        clients.append(KubeClient.for_cluster(settings.cluster))
        return clients[-1]

    _warn_about_unused(knobs, settings)
    try:
        summary = manager.run_uninstall(paths_of(), settings, options, runner=Runner(), api_factory=api_factory)
    finally:
        for client in clients:
            client.close()
    typer.echo(f"driver-manager: {summary}")


@app.command("uninstall")
def uninstall() -> None:
    """Removing this project from a node: unmount DRIVER_ROOT (its tmpfs and the mounts below it) and
    remove the node's nvidia-driver-container/* annotations. Idempotent; never unloads a module."""

    typer.echo(f"driver-manager: {remove.run_remove(paths_of(), Runner(), Settings.from_env().cluster)}")


@app.command("preflight_check")
def preflight_check() -> None:
    """Read-only: platform, pre-installed host driver, loaded module vs image userspace, module files
    under /host. Exit 1 with the reason when uninstall_driver or init would refuse; no API calls."""

    settings = Settings.from_env()
    _warn_about_unused(manager_knobs(), settings)
    for line in manager.run_preflight(paths_of(), settings):
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
