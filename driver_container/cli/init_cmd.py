"""``init``, ``load`` and ``unload``: thin wrappers over driver_container.lifecycle.init."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from driver_container.cli.app import app, host_paths
from driver_container.cli.init_entry import start_init
from driver_container.lifecycle.hostcheck import loaded_version
from driver_container.runtime.runner import Runner
from driver_container.settings import Settings, resolve

log = logging.getLogger(__name__)


@app.command("init")
def init(
    ctx: typer.Context,
    no_wait: Annotated[
        bool, typer.Option("--no-wait", help="return after publishing; start no daemon (tests, demo)")
    ] = False,
    accept_license: Annotated[
        bool, typer.Option("--accept-license", "-a", help="accepted for NVIDIA compatibility; does nothing")
    ] = False,
    max_threads: Annotated[
        int | None, typer.Option("--max-threads", "-m", help="accepted for NVIDIA compatibility; does nothing")
    ] = None,
    persistenced_runtime_dir: Annotated[
        Path | None,
        typer.Option(
            hidden=True,
            help="nvidia-persistenced's fixed runtime dir in this container (tests)",
        ),
    ] = None,
) -> None:
    """Verify the loaded driver, publish DRIVER_ROOT, start nvidia-persistenced, wait for a signal."""
    # NVIDIA's script accepts these for its installer (license prompt, build threads); we build nothing.
    notes = []
    if accept_license:
        notes.append("--accept-license: ignored (nothing is installed or built)")
    if max_threads is not None:
        notes.append(f"--max-threads {max_threads}: ignored (nothing is built)")
    start_init(
        host_paths(ctx),
        Settings.from_env(),
        no_wait=no_wait,
        persistenced_runtime_dir=resolve.persistenced_runtime_dir(None, persistenced_runtime_dir),
        notes=tuple(notes),
    )


@app.command("load")
def load(ctx: typer.Context) -> None:
    """On Talos: wait for machined's modules and verify them. Elsewhere: load them, then verify."""
    # Lazy, hot path: the module loader (modprobe/) is never imported by `init` (test_startup_imports.py).
    from driver_container.lifecycle.generic_host import run_load

    state = run_load(host_paths(ctx), Settings.from_env(), Runner())
    loaded = [name for name, module in state.modules.items() if module.loaded]
    typer.echo(f"NVIDIA driver {loaded_version(state)} loaded and matching: {', '.join(loaded)}")


@app.command("unload")
def unload(ctx: typer.Context) -> None:
    """On Talos: explain that Talos owns the modules (exit 0). Elsewhere: unload them refcount-safely."""
    # Lazy, hot path: the module loader (modprobe/) is never imported by `init` (test_startup_imports.py).
    from driver_container.lifecycle.generic_host import run_unload

    typer.echo(run_unload(host_paths(ctx), Settings.from_env(), Runner()))
