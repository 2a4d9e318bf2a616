"""`nvidia-driver bug-report [-o FILE|-]`: one archive for NVIDIA support and this project (docs/bug-report.md).

On Talos there is no shell on the node: ``kubectl exec -n <ns> <driver pod> -- nvidia-driver bug-report -o -
> report.tar.gz``. The collecting is driver_container/report/ (typer-free); this module parses the options,
and writes the archive.
"""

from __future__ import annotations

import sys
import time
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from driver_container.base.errors import UsageError
from driver_container.cli.app import app, host_paths
from driver_container.report.archive import write_archive
from driver_container.report.collect import ReportOptions, collect_report, status_document
from driver_container.runtime.fsutil import sweep_temporaries
from driver_container.runtime.signalcleanup import SignalCleanup
from driver_container.settings import Settings

MIN_SIZE = 64 << 10  # room for the index, status.json and the manifest's start
OUTPUT_HELP = "archive path, '-' for stdout (default ./nvidia-driver-bug-report-<UTC time>.tar.gz)"


def default_output() -> Path:
    return Path(time.strftime("nvidia-driver-bug-report-%Y%m%dT%H%M%SZ.tar.gz", time.gmtime()))


@app.command("bug-report")
def bug_report(
    ctx: typer.Context,
    output: Annotated[str | None, typer.Option("--output", "-o", help=OUTPUT_HELP)] = None,
    max_size: Annotated[int, typer.Option(help="bytes of collected files at most (before compression)")] = 8 << 20,
    timeout: Annotated[float, typer.Option(help="seconds for everything, nvidia-bug-report.sh included")] = 60.0,
    nvidia_bug_report: Annotated[
        bool, typer.Option(help="run the image's nvidia-bug-report.sh when a GPU is present")
    ] = True,
) -> None:
    """Write one .tar.gz: status --json, the manifest and a fresh check of DRIVER_ROOT, init's log, module
    facts, the kernel's NVIDIA messages, nvidia-bug-report.sh's log; never tokens or kubeconfigs."""
    if max_size < MIN_SIZE:
        raise UsageError(f"--max-size {max_size}: at least {MIN_SIZE} bytes", name="--max-size", value=str(max_size))
    if not timeout > 0:
        raise UsageError(f"--timeout {timeout:g}: must be more than 0 s", name="--timeout", value=str(timeout))
    to_stdout = output == "-"
    if to_stdout and sys.stdout.isatty():
        raise UsageError(
            "-o -: refusing to write a binary archive to a terminal",
            name="--output",
            value="-",
            fix="redirect it: ... bug-report -o - > report.tar.gz",
        )
    paths = host_paths(ctx)

    options = ReportOptions(total_cap=max_size, deadline_s=timeout, run_bug_script=nvidia_bug_report)
    target = None if to_stdout else Path(output) if output else default_output()
    # Until the archive is written, a termination signal ends what the report started and removes what
    # it wrote (runtime/signalcleanup.py), then ends this process as that signal does.
    cleanup = SignalCleanup().install()
    try:
        data = collect_report(paths, options, partial(status_document, paths, Settings.from_env()), None, cleanup)
        if target is not None:
            cleanup.add(f"removed the temporaries of {target}", lambda: sweep_temporaries(target))
        write_archive(data, target, sys.stdout.buffer)
    finally:
        cleanup.restore()
    typer.echo(f"bug report: {len(data)} bytes written to {'stdout' if target is None else target}", err=True)
