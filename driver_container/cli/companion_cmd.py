"""``nvidia-gds-driver`` and ``nvidia-gdrcopy-driver``: the commands gpu-operator's GDS and GDRCopy sidecars
run (``<command> install``), for this image set as their image on Talos (lifecycle/companion.py)."""

from __future__ import annotations

import sys

from driver_container import logs
from driver_container.base.errors import DriverContainerError, UsageError
from driver_container.cli import die_of_sigint, report_error, report_unexpected, sigint_as_sigterm
from driver_container.lifecycle.companion import run_companion
from driver_container.settings import Settings
from driver_container.settings.resolve import logging_of, paths_of

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
        chosen = logging_of()
        logs.configure(json_format=chosen.json, verbose=chosen.verbose)
        run_companion(paths_of(), Settings.from_env(), module)
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
