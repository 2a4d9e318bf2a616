"""``nvidia-driver index-userspace`` (hidden): the image build's digest index (docs/image.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from driver_container.cli.app import app, host_paths
from driver_container.inspect.userspace import find_userspace
from driver_container.publish.index_build import build_index
from driver_container.runtime.runner import Runner


@app.command("index-userspace", hidden=True)
def index_userspace(
    ctx: typer.Context,
    version: Annotated[
        str | None, typer.Option("--version", help="driver version (default: the image's libcuda.so.<v>)")
    ] = None,
) -> None:
    """Record size, mtime, sha256 and ELF facts of every file a publish reads (run by the Dockerfile)."""
    paths = host_paths(ctx)
    wanted = version or find_userspace(paths.userspace).version
    if not wanted:
        raise typer.BadParameter(f"no NVIDIA userspace found in {paths.userspace_root}; pass --version")
    summary = build_index(paths.userspace, wanted, Runner())
    typer.echo(f"{summary.path}: {summary.files} files ({summary.elf} ELF objects) of {wanted}")
