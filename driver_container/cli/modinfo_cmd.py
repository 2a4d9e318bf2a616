"""`nvidia-driver modinfo` (placeholder; owned by the kmod engine work)."""

from driver_container.cli.app import app


@app.command("version")
def version() -> None:
    """Print the entrypoint's version."""
    import typer

    from driver_container import __version__

    typer.echo(__version__)
