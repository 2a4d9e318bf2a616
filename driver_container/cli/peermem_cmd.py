"""``reload_nvidia_peermem`` and ``probe_nvidia_peermem`` (the operator's peermem sidecar).

The probe runs every 30 s as a liveness probe. ``node.peermem.probe`` imports neither typer nor settings,
so the console-script entry can call it before importing the CLI (bench/startup.py measures it).
"""

from __future__ import annotations

import typer

from driver_container.cli.app import app, host_paths
from driver_container.lifecycle.peermem import probe, run_reload
from driver_container.runtime.runner import Runner
from driver_container.settings import Settings


@app.command("probe_nvidia_peermem")
def probe_nvidia_peermem(ctx: typer.Context) -> None:
    """Exit 1 only when mlx5_core is loaded and nvidia_peermem is not (liveness probe)."""

    healthy, reason = probe(host_paths(ctx))
    if not healthy:
        typer.echo(f"probe_nvidia_peermem: {reason}", err=True)
        raise typer.Exit(1)


@app.command("reload_nvidia_peermem")
def reload_nvidia_peermem(ctx: typer.Context) -> None:
    """Wait for nvidia_peermem (loaded by Talos) and the driver pod's readiness, then for a signal."""

    run_reload(host_paths(ctx), Settings.from_env(), Runner())
