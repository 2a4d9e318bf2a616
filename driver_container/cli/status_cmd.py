"""`nvidia-driver status [--json]`: the host picture and the findings; exit 1 on an error finding."""

from __future__ import annotations

from typing import Annotated

import typer

from driver_container.cli.app import app, host_paths
from driver_container.lifecycle.status import status_report
from driver_container.settings import Settings


@app.command("status")
def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="print the state as one JSON document")] = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="hash every published file and compare it with the manifest")
    ] = False,
) -> None:
    """Show platform, NVIDIA modules, the image's userspace, the driver root and findings.

    --verify also reads every file under DRIVER_ROOT and reports one that differs from the manifest
    (content, size, mode, link target) as PUBLISHED_FILE_CHANGED. Without it, the outcome of the check
    `init` makes once after Ready is reported.

    Exit status: 0 without error findings, 1 with one, 2 on usage errors.
    """
    text, failed = status_report(host_paths(ctx), Settings.from_env(), verify=verify, as_json=as_json)
    typer.echo(text)
    raise typer.Exit(1 if failed else 0)
