"""Command-line entry points. The only layer that prints, exits, or maps errors to exit codes."""

from __future__ import annotations

import gc
import sys

from driver_container.base.errors import DriverContainerError  # no imports of its own

# Nothing heavier at the top: the liveness probe's glance (``_probe_fast_path``) runs before any import
# but its own (lifecycle/peermem_glance.py); ``main`` imports the rest.


# The command modules of ``nvidia-driver`` and the commands each adds to ``app``.
COMMAND_MODULES = {
    "bugreport_cmd": ("bug-report",),
    "index_cmd": ("index-userspace",),
    "init_cmd": ("init", "load", "unload"),
    "modinfo_cmd": ("version", "modinfo"),
    "peermem_cmd": ("probe_nvidia_peermem", "reload_nvidia_peermem"),
    "status_cmd": ("status",),
}


def command_modules(args: list[str]) -> list[str]:
    """The command modules to register for ``args``: those naming a command in ``args``, or all of them
    (``--help``, no command, a typo: typer then lists or suggests every command).

    typer builds every registered command's parameters from its signature on each call, which costs
    more than the command itself for ``init`` restarts and ``status`` (bench/startup.py)."""
    named = [module for module, commands in COMMAND_MODULES.items() if any(c in args for c in commands)]
    return named or list(COMMAND_MODULES)


def _register_commands(args: list[str] | None = None) -> None:
    # Each module adds its commands to ``app`` and imports what they use (only the named ones are imported).
    import importlib  # lazy, hot path: only the named command's module is imported (command_modules)

    for module in command_modules(args or []):
        importlib.import_module(f"driver_container.cli.{module}")


def report_error(exc: DriverContainerError, prog: str = "nvidia-driver") -> int:
    """One clear line (plus the fix), never a traceback, for an expected failure. Its structured fields
    (``DriverContainerError.details``) go to the debug log (--verbose; a ``details`` key in JSON lines)."""
    details = exc.details()
    if details:
        import logging  # lazy, hot path: see the note at the top (only on an error)

        logging.getLogger(__name__).debug("%s: %s %s", prog, type(exc).__name__, details, extra={"details": details})
    sys.stderr.write(f"{prog}: error: {exc.message}\n")
    if exc.fix:
        sys.stderr.write(f"{prog}: fix: {exc.fix}\n")
    return exc.exit_code


def report_unexpected(exc: Exception, prog: str = "nvidia-driver") -> int:
    """A bug or an input no parser anticipated: one line and exit 1, the traceback only with --verbose
    (a raw traceback in the pod log hides the one line that says what happened)."""
    # Lazy, hot path: see the note at the top (only on an error).
    import logging

    from driver_container.runtime.forkchild import internal_error_line

    logging.getLogger(__name__).debug("%s: unexpected error", prog, exc_info=exc)
    sys.stderr.write(f"{prog}: error: {internal_error_line(exc)}\n")
    sys.stderr.write(f"{prog}: fix: run again with --verbose (VERBOSE=true) for the traceback and report it\n")
    return 1


def sigint_as_sigterm() -> None:
    """SIGINT gets SIGTERM's default action: the process ends by the signal, no KeyboardInterrupt and
    so no traceback, wherever it lands (typer's import, a command's read, click's "Aborted!" path).
    ``init``, ``driver-manager`` and the companions then install ``Shutdown``, which handles SIGINT as it
    handles SIGTERM. Only for the process's own entry (a console script): an in-process caller (tests)
    keeps its own handler."""
    import signal  # lazy, hot path: the peermem probe's fast path returns before this (~0.5 ms import)

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def die_of_sigint() -> None:
    """A SIGINT that came before ``sigint_as_sigterm`` (as a KeyboardInterrupt): end as that signal
    ends the process by default, as SIGTERM would, without a traceback (exit status 128+2 to a shell)."""
    # Lazy, hot path: see the note at the top (only after a SIGINT).
    import os
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(128 + signal.SIGINT)  # pragma: no cover - only when SIGINT is blocked


def _probe_fast_path(args: list[str]) -> int | None:
    """``probe_nvidia_peermem`` without typer: it is a liveness probe run every 30 s on every GPU node,
    and typer's import plus its per-call set-up cost more than the probe itself (bench/startup.py).
    The common answers come from a glance at /proc/modules with ``os`` calls only."""
    if args != ["probe_nvidia_peermem"]:
        return None
    # Lazy, hot path: the probe runs every 30 s and its floor is a bare interpreter start (bench/startup.py).
    from driver_container.lifecycle.peermem_glance import passes_at_a_glance, procfs_root

    if passes_at_a_glance(procfs_root()):
        return 0
    # Lazy, hot path: only when the glance cannot tell (mlx5_core without nvidia_peermem, odd input).
    from driver_container.lifecycle.peermem import probe
    from driver_container.settings.resolve import paths_of

    healthy, reason = probe(paths_of())
    if not healthy:
        sys.stderr.write(f"probe_nvidia_peermem: {reason}\n")
    return 0 if healthy else 1


def _init_direct(args: list[str]) -> bool:
    """``init`` as the DaemonSet runs it, without typer (cli/init_entry.py says why and when)."""
    if args[:1] != ["init"]:
        return False
    # Lazy, hot path: the direct init imports no typer (bench/startup.py); every other command does.
    from driver_container.cli.init_entry import run_direct

    return run_direct(args)


def main(argv: list[str] | None = None) -> None:
    """The console script. As the process's own entry (``argv`` None) it keeps the cyclic garbage collector
    off for start-up and freezes everything at exit: nearly all of the ~20 000 objects a command creates
    are modules, classes and functions that live until exit, so collecting them is pure cost: ~19% of an
    unchanged ``init`` restart's CPU time, ~9% of the probe's (bench/README.md). ``Shutdown.wait``, where
    every long wait goes through, turns it back on."""
    args = sys.argv[1:] if argv is None else argv
    console = argv is None
    if console:
        gc.disable()
    try:
        fast = _probe_fast_path(args)
        if fast is not None:
            sys.exit(fast)
        if console:
            sigint_as_sigterm()
        if _init_direct(args):
            return
        # Lazy, hot path: typer is imported only when not on the probe fast path (bench/startup.py).
        from driver_container.cli.app import app

        _register_commands(args)
        # Standalone mode: typer prints usage errors (exit 2) and turns typer.Exit into sys.exit.
        app(args=args)
    except DriverContainerError as exc:
        sys.exit(report_error(exc))
    except Exception as exc:  # the one boundary where an unexpected error becomes a message
        sys.exit(report_unexpected(exc))
    except KeyboardInterrupt:
        if not console:
            raise
        die_of_sigint()
    finally:
        if console:
            gc.freeze()


def _console_entry(module: str, function: str) -> None:
    """A console script other than ``nvidia-driver``: SIGINT as SIGTERM before its module (typer, the
    Kubernetes client) is imported, so no SIGINT at any point of its start gives a traceback."""
    try:
        sigint_as_sigterm()
        import importlib  # lazy, hot path: see the note at the top

        entry = getattr(importlib.import_module(f"driver_container.cli.{module}"), function)
    except KeyboardInterrupt:  # before sigint_as_sigterm took effect
        die_of_sigint()
        return
    entry()


def manager_main() -> None:
    """``driver-manager`` (cli/manager_cmd.py)."""
    _console_entry("manager_cmd", "main")


def gds_main() -> None:
    """``nvidia-gds-driver`` (cli/companion_cmd.py)."""
    _console_entry("companion_cmd", "gds_main")


def gdrcopy_main() -> None:
    """``nvidia-gdrcopy-driver`` (cli/companion_cmd.py)."""
    _console_entry("companion_cmd", "gdrcopy_main")
