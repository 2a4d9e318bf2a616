"""`nvidia-driver status [--json]`: the host picture and the findings; exit 1 on an error finding."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from driver_container.cli.app import app, host_paths
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
    # Lazy, hot path: every command imports this module at registration; `modinfo` (bench/modinfo.py)
    # must not pay for inspect/publish.
    from driver_container.cli.status_render import render_text, status_json
    from driver_container.findings import check, has_errors
    from driver_container.findings.integrity import integrity_findings
    from driver_container.inspect.hoststate import inspect_host
    from driver_container.publish.integrity import last_verification, verify_published
    from driver_container.publish.toolkit_features import read_absent_features
    from driver_container.runtime.runner import Runner

    paths = host_paths(ctx)
    # The runner executes from the published root: DRIVER_ROOT_NOT_EXECUTABLE is init's own proof.
    state = inspect_host(paths, Settings.from_env(), prove_with=Runner())
    absent = read_absent_features(paths)  # what the toolkit would mount and the root lacks (issue 29)
    findings = check(state)
    if verify:
        findings += integrity_findings(verify_published(paths.driver_root), paths.driver_root, when="now")
    else:
        findings += integrity_findings(last_verification(paths), paths.driver_root, when="after Ready")
    if as_json:
        typer.echo(json.dumps(status_json(state, findings, absent), indent=2, sort_keys=False))
    else:
        typer.echo(render_text(state, findings, absent))
    raise typer.Exit(1 if has_errors(findings) else 0)
