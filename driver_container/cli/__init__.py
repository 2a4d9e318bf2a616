"""Command-line entry points. The only layer that prints, exits, or maps errors to exit codes."""

from __future__ import annotations

import logging
import sys

from driver_container.errors import DriverContainerError

log = logging.getLogger(__name__)


def _register_commands() -> None:
    # Each module adds its commands to ``app``; heavy imports stay inside the command bodies.
    from driver_container.cli import index_cmd, init_cmd, modinfo_cmd, peermem_cmd, status_cmd  # noqa: F401


def report_error(exc: DriverContainerError, prog: str = "nvidia-driver") -> int:
    """One clear line (plus the fix), never a traceback, for an expected failure."""
    sys.stderr.write(f"{prog}: error: {exc.message}\n")
    if exc.fix:
        sys.stderr.write(f"{prog}: fix: {exc.fix}\n")
    return exc.exit_code


def report_unexpected(exc: Exception, prog: str = "nvidia-driver") -> int:
    """A bug or an input no parser anticipated: one line and exit 1, the traceback only with --verbose
    (a raw traceback in the pod log hides the one line that says what happened)."""
    log.debug("%s: unexpected error", prog, exc_info=exc)
    detail = str(exc).splitlines()[0][:200] if str(exc) else ""
    sys.stderr.write(f"{prog}: error: internal error: {type(exc).__name__}{': ' + detail if detail else ''}\n")
    sys.stderr.write(f"{prog}: fix: run again with --verbose (VERBOSE=true) for the traceback and report it\n")
    return 1


def _probe_fast_path(args: list[str]) -> int | None:
    """``probe_nvidia_peermem`` without typer: it is a liveness probe run every 30 s on every GPU node,
    and typer's import plus its per-call set-up cost more than the probe itself (bench/probe.py)."""
    if args != ["probe_nvidia_peermem"]:
        return None
    # Lazy, hot path: the probe runs every 30 s; it needs only these two light modules (bench/probe.py).
    from driver_container.lifecycle.peermem import probe
    from driver_container.paths import HostPaths

    healthy, reason = probe(HostPaths.from_env())
    if not healthy:
        sys.stderr.write(f"probe_nvidia_peermem: {reason}\n")
    return 0 if healthy else 1


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        fast = _probe_fast_path(args)
        if fast is not None:
            sys.exit(fast)

        # Lazy, hot path: typer is imported only when not on the probe fast path (bench/probe.py).
        from driver_container.cli.app import app

        _register_commands()
        # Standalone mode: typer prints usage errors (exit 2) and turns typer.Exit into sys.exit.
        app(args=args)
    except DriverContainerError as exc:
        sys.exit(report_error(exc))
    except Exception as exc:  # the one boundary where an unexpected error becomes a message
        sys.exit(report_unexpected(exc))
