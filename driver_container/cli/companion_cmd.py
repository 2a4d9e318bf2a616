"""``nvidia-gds-driver`` and ``nvidia-gdrcopy-driver``: the commands gpu-operator's GDS and GDRCopy sidecars
run (``<command> install``), for this image set as their image on Talos (lifecycle/companion.py)."""

from __future__ import annotations

import os
import sys

from driver_container import logs
from driver_container.base.errors import DriverContainerError, UsageError
from driver_container.base.paths import HostPaths
from driver_container.cli import die_of_sigint, report_error, report_unexpected, sigint_as_sigterm
from driver_container.lifecycle.companion import run_companion
from driver_container.settings import Settings, parse_bool

USAGE = "usage: {prog} install   (on Talos: check that Talos loaded {module}, then wait for a signal)"


def _run(prog: str, module: str, argv: list[str] | None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        if argv is None:  # the console script (see driver_container.cli.main)
            sigint_as_sigterm()
        if args in (["-h"], ["--help"]):
            sys.stdout.write(USAGE.format(prog=prog, module=module) + "\n")
            return
        if args != ["install"]:
            raise UsageError(USAGE.format(prog=prog, module=module), name="command", value=" ".join(args))
        env = os.environ
        verbose = parse_bool("VERBOSE", env.get("VERBOSE"), False)
        log_format = env.get("LOG_FORMAT") or "human"
        if log_format not in logs.LOG_FORMATS:
            raise UsageError(
                f"LOG_FORMAT={log_format!r}: not one of {', '.join(logs.LOG_FORMATS)}",
                name="LOG_FORMAT",
                value=log_format,
            )
        logs.configure(json_format=log_format == "json", verbose=verbose)
        run_companion(HostPaths.from_env(), Settings.from_env(), module)
    except DriverContainerError as exc:
        sys.exit(report_error(exc, prog))
    except Exception as exc:  # the one boundary where an unexpected error becomes a message
        sys.exit(report_unexpected(exc, prog))
    except KeyboardInterrupt:
        if argv is not None:
            raise
        die_of_sigint()


def gds_main(argv: list[str] | None = None) -> None:
    _run("nvidia-gds-driver", "nvidia_fs", argv)


def gdrcopy_main(argv: list[str] | None = None) -> None:
    _run("nvidia-gdrcopy-driver", "gdrdrv", argv)
