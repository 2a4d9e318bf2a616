"""`nvidia-driver modinfo`: kmod's modinfo, byte for byte, plus `--json`; and `nvidia-driver version`.

Arguments are files (anything that contains '/' or ends like a module file, or that exists) or module
names looked up under BASEDIR/lib/modules/KVER (default: the host root, the host's running kernel).
A bad file gives one line on stderr and exit status 1; the other files are still printed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from driver_container import project_version
from driver_container.base.errors import DriverContainerError
from driver_container.cli.app import app, host_paths
from driver_container.formats.kmod import format_modinfo, to_json
from driver_container.inspect.platform import read_kernel_release
from driver_container.readers.kmod import find_module, read_module

MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")


@app.command("version")
def version() -> None:
    """Print the entrypoint's version."""

    typer.echo(project_version())


def _is_path(arg: str) -> bool:
    # Like kmod: a name unless it looks like a module file; a plain existing file counts too.
    return "/" in arg or arg.endswith(MODULE_SUFFIXES) or os.path.isfile(arg)


def _running_kernel(ctx: typer.Context) -> str:
    # Inside the pod uname() is the host's kernel too; the proc root is read first so a fixture can set it.
    return read_kernel_release(host_paths(ctx).proc) or os.uname().release


def _resolve(ctx: typer.Context, arg: str, kver: str | None, basedir: Path | None) -> str | Path:
    if _is_path(arg):
        return arg  # the text as given: kmod prints it unnormalised (readers/kmod.py absolute_name)
    return find_module(arg, kver or _running_kernel(ctx), basedir or host_paths(ctx).host_root)


def _write(data: bytes) -> None:
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        # `modinfo ... | head`: the reader went away; stop quietly like a C tool killed by SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(141) from None


@app.command("modinfo")
def modinfo(
    ctx: typer.Context,
    modules: Annotated[list[str], typer.Argument(metavar="FILE_OR_NAME", show_default=False)],
    field: Annotated[str | None, typer.Option("-F", "--field", help="print only this field's values")] = None,
    null: Annotated[bool, typer.Option("-0", "--null", help="end records with NUL instead of newline")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON array for programs")] = False,
    kver: Annotated[str | None, typer.Option("-k", "--set-version", help="kernel version for names")] = None,
    basedir: Annotated[
        Path | None, typer.Option("-b", "--basedir", help="root holding lib/modules (default: host root)")
    ] = None,
) -> None:
    """Show module information exactly like kmod's modinfo (text) or as JSON."""
    failed = False
    records: list[object] = []
    for arg in modules:
        try:
            info = read_module(_resolve(ctx, arg, kver, basedir))
        except DriverContainerError as exc:
            failed = True
            sys.stderr.write(f"modinfo: ERROR: {exc.message}\n")
            continue
        if as_json:
            record = to_json(info)
            records.append(record if field is None else {"filename": info.filename, field: _values(record, field)})
        else:
            _write(format_modinfo(info, field=field, null=null))
    if as_json:
        _write(json.dumps(records, indent=2, ensure_ascii=True).encode() + b"\n")
    if failed:
        raise typer.Exit(1)


def _values(record: dict[str, object], field: str) -> object:
    if field in ("filename", "name", "parameters", "signature"):
        return record[field]
    fields = record["fields"]
    assert isinstance(fields, list)
    return [value for key, value in fields if key == field]
