"""``--version`` of ``nvidia-driver`` and ``driver-manager``: the project's version and the driver version of
the NVIDIA userspace the image carries.

The driver version is read as every command reads it, through the userspace inspection (libcuda's and
libnvidia-ml's file names under USERSPACE_ROOT, inspect/userspace.py): the image's own record of what it
ships. Outside the image (no NVIDIA userspace under that root) the second line says so."""

from __future__ import annotations

from typing import Any

import typer


def version_lines(prog: str) -> list[str]:
    """The lines ``--version`` prints."""
    # Lazy, hot path: only for --version (the inspection and importlib.metadata cost milliseconds).
    from driver_container import project_version
    from driver_container.inspect.userspace import find_userspace
    from driver_container.settings.resolve import paths_of

    paths = paths_of()
    found = find_userspace(paths.userspace)
    if found.version is None:
        driver = f"driver: none (no NVIDIA userspace under {paths.userspace_root}: not inside the driver image)"
    else:
        driver = f"driver: {found.version} (NVIDIA userspace under {paths.userspace_root})"
    return [f"{prog} {project_version()}", driver]


def version_option(prog: str) -> Any:
    """The eager ``--version`` option: prints ``version_lines`` and exits 0 before any command runs."""

    def show(value: bool) -> None:
        if value:
            for line in version_lines(prog):
                typer.echo(line)
            raise typer.Exit()

    return typer.Option(
        "--version", callback=show, is_eager=True, expose_value=True, help="print the versions and exit"
    )
