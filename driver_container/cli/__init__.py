"""Command-line entry points. The only layer that prints, exits, or maps errors to exit codes."""

from __future__ import annotations

import sys

from driver_container.errors import DriverContainerError


def _register_commands() -> None:
    # Each module adds its commands to ``app``; heavy imports stay inside the command bodies.
    from driver_container.cli import init_cmd, modinfo_cmd, peermem_cmd, status_cmd  # noqa: F401


def report_error(exc: DriverContainerError) -> int:
    """One clear line (plus the fix), never a traceback, for an expected failure."""
    sys.stderr.write(f"nvidia-driver: error: {exc.message}\n")
    if exc.fix:
        sys.stderr.write(f"nvidia-driver: fix: {exc.fix}\n")
    return exc.exit_code


def main(argv: list[str] | None = None) -> None:
    from driver_container.cli.app import app

    _register_commands()
    try:
        # Standalone mode: typer prints usage errors (exit 2) and turns typer.Exit into sys.exit.
        app(args=argv)
    except DriverContainerError as exc:
        sys.exit(report_error(exc))
