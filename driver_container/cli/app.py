"""The typer application and the options shared by every command.

Global options come before the command (``nvidia-driver --host-root X status``); each is also read
from the environment variable of the same name, which is how the DaemonSet sets them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from driver_container import logs
from driver_container.paths import HostPaths

app = typer.Typer(
    name="nvidia-driver",
    help="NVIDIA driver container entrypoint for Talos Linux (and generic hosts).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

PathOpt = Annotated[Path | None, typer.Option(show_default=False)]


@app.callback()
def configure(
    ctx: typer.Context,
    host_root: Annotated[Path | None, typer.Option(envvar="HOST_ROOT", help="host / (default /host)")] = None,
    procfs_root: Annotated[Path | None, typer.Option(envvar="PROCFS_ROOT", help="(default /proc)")] = None,
    sysfs_root: Annotated[Path | None, typer.Option(envvar="SYSFS_ROOT", help="(default /sys)")] = None,
    run_dir: Annotated[Path | None, typer.Option(envvar="RUN_DIR", help="(default /run/nvidia)")] = None,
    driver_root: Annotated[
        Path | None, typer.Option(envvar="DRIVER_ROOT", help="published root (default RUN_DIR/driver)")
    ] = None,
    host_driver_root: Annotated[
        Path | None, typer.Option(envvar="HOST_DRIVER_ROOT", help="DRIVER_ROOT as the host sees it")
    ] = None,
    userspace_root: Annotated[
        Path | None, typer.Option(envvar="USERSPACE_ROOT", help="image root holding the NVIDIA userspace (/)")
    ] = None,
    host_os_release: Annotated[
        Path | None,
        typer.Option(envvar="HOST_OS_RELEASE", help="(default /host-etc/os-release, else HOST_ROOT/etc/os-release)"),
    ] = None,
    drivers_conf_dir: Annotated[
        Path | None, typer.Option(envvar="DRIVERS_CONF_DIR", help="module parameter files (default /drivers)")
    ] = None,
    fabricmanager_run_dir: Annotated[
        Path | None,
        typer.Option(envvar="FABRICMANAGER_RUN_DIR", help="FM pid files, sockets (default /run/nvidia-fabricmanager)"),
    ] = None,
    fabricmanager_log_dir: Annotated[
        Path | None, typer.Option(envvar="FABRICMANAGER_LOG_DIR", help="FM and NVLSM logs (default /var/log)")
    ] = None,
    log_format: Annotated[str, typer.Option(envvar="LOG_FORMAT", help="human or json")] = "human",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", envvar="VERBOSE")] = False,
) -> None:

    logs.configure(json_format=log_format == "json", verbose=verbose)
    ctx.obj = HostPaths.from_mapping(
        {
            "HOST_ROOT": host_root,
            "PROCFS_ROOT": procfs_root,
            "SYSFS_ROOT": sysfs_root,
            "RUN_DIR": run_dir,
            "DRIVER_ROOT": driver_root,
            "HOST_DRIVER_ROOT": host_driver_root,
            "USERSPACE_ROOT": userspace_root,
            "HOST_OS_RELEASE": host_os_release,
            "DRIVERS_CONF_DIR": drivers_conf_dir,
            "FABRICMANAGER_RUN_DIR": fabricmanager_run_dir,
            "FABRICMANAGER_LOG_DIR": fabricmanager_log_dir,
        }
    )


def host_paths(ctx: typer.Context) -> HostPaths:
    paths = ctx.find_root().obj
    assert isinstance(paths, HostPaths)
    return paths
