"""The typer application and the options shared by every command.

Global options come before the command (``nvidia-driver --host-root-mount X status``); each is also read
from the environment variable of the same name, which is how the DaemonSet sets them.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated

import typer

from driver_container import logs
from driver_container.base.paths import HOST_ROOTS, HostPaths, HostRootOption
from driver_container.cli.about import version_option
from driver_container.settings.resolve import logging_of as logs_of

app = typer.Typer(
    name="nvidia-driver",
    help="NVIDIA driver container entrypoint for Talos Linux (and generic hosts).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def configure(
    ctx: typer.Context, log_format: logs.LogFormat | None, verbose: bool, version: bool, **roots: Path | None
) -> None:
    # typer resolves each root's variable (envvar, below) into its option; the logging variables are the
    # reader's (settings/resolve.py), so that every command parses them alike; an explicit option wins.
    chosen = logs_of(None, {"LOG_FORMAT": log_format.value if log_format else None, "VERBOSE": verbose})
    logs.configure(json_format=chosen.json, verbose=chosen.verbose)
    ctx.obj = HostPaths.from_mapping({root.env: roots[_option_name(root)] for root in HOST_ROOTS})


def _option_name(root: HostRootOption) -> str:
    return root.env.lower()


def _signature() -> inspect.Signature:
    """``configure``'s parameters as typer reads them: one option per row of ``paths.HOST_ROOTS``."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    roots = [
        inspect.Parameter(
            _option_name(root),
            keyword,
            default=None,
            annotation=Annotated[Path | None, typer.Option(envvar=root.env, help=root.help)],
        )
        for root in HOST_ROOTS
    ]
    return inspect.Signature(
        [
            inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
            *roots,
            inspect.Parameter(
                "log_format",
                keyword,
                default=None,
                annotation=Annotated[logs.LogFormat | None, typer.Option(help=logs.LOG_FORMAT_HELP)],
            ),
            inspect.Parameter(
                "verbose",
                keyword,
                default=False,
                annotation=Annotated[bool, typer.Option("--verbose", "-v", help=logs.VERBOSE_HELP)],
            ),
            inspect.Parameter(
                "version", keyword, default=False, annotation=Annotated[bool, version_option("nvidia-driver")]
            ),
        ]
    )


configure.__signature__ = _signature()  # type: ignore[attr-defined]
app.callback()(configure)


def host_paths(ctx: typer.Context) -> HostPaths:
    paths = ctx.find_root().obj
    assert isinstance(paths, HostPaths)
    return paths
