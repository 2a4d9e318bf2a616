"""`nvidia-driver status [--json]`: the host picture and the findings; exit 1 on an error finding."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from driver_container.cli.app import app, host_paths

if TYPE_CHECKING:
    from driver_container.inspect.hoststate import HostState


def _module_line(entry: dict[str, object]) -> str:
    if not entry["loaded"]:
        text = f"  {entry['name']:<15} not loaded"
    else:
        kind = "built-in" if entry["builtin"] else str(entry["state"] or "loaded")
        refcnt = "-" if entry["refcnt"] is None else entry["refcnt"]
        text = (
            f"  {entry['name']:<15} {kind:<8} version {entry['version'] or '-'}"
            f"  srcversion {entry['srcversion'] or '-'}  refcnt {refcnt}"
        )
    if entry["file"]:
        text += f"\n  {'':<15} file {entry['file']} (version {entry['file_version'] or '-'})"
    return text


def _fabric_lines(fab: dict[str, Any]) -> list[str]:
    port = fab["management_port"]
    lines = [
        f"fabric: {fab['kind']}, {len(fab['nvswitch_devices'])} NVSwitch device(s)"
        + (f", LPF {', '.join(fab['lpf_devices'])}" if fab["lpf_devices"] else "")
        + (f", management port {port['device']}/{port['port']} {port['guid']}" if port else ""),
    ]
    for name, where in fab["image"].items():
        lines.append(f"  image {name}: {where or 'missing'}")
    lines += [f"  {d['name']}: running (pid {d['pid'] or '?'}, {d['evidence']})" for d in fab["daemons"]]
    if not fab["daemons"]:
        lines.append("  daemons: none running")
    return lines


def render_text(state: HostState) -> str:
    """The human form of ``state.to_json()``."""
    doc = state.to_json()
    plat, nv, us, root = doc["platform"], doc["nvidia"], doc["userspace"], doc["driver_root"]
    talos = f" {plat['talos_version']}" if plat["talos_version"] else ""
    lines = [
        f"platform: {plat['name']}{talos} ({plat['evidence']}), kernel {plat['kernel_release'] or 'unknown'}",
        "modules:",
        *(_module_line(m) for m in doc["modules"]),
        f"module files: from {doc['module_files_source']}",
    ]
    if nv["version"]:
        lines.append(f"nvidia: {nv['version']} {nv['flavour']}, {len(nv['gpus'])} GPU(s)")
        lines += [
            f"  {g['pci_id']} {g['model'] or '?'} {g['uuid'] or ''} minor {g['device_minor']}" for g in nv["gpus"]
        ]
    lines.append(f"userspace: {us['version'] or 'not found'} (root {us['root']}, {us['libcuda'] or us['source']})")
    lines.append(f"driver root: {root['path']} ({_publish_line(root)})")
    if root["mount"]:
        m = root["mount"]
        lines.append(f"  mount {m['mount_point']} {m['fstype']} {m['source']} {','.join(m['options'])}")
    if doc["fabric"] is not None:
        lines += _fabric_lines(doc["fabric"])
    lines.append("findings:" if doc["findings"] else "findings: none")
    for f in doc["findings"]:
        lines.append(f"  {f['severity'].upper()} {f['code']}: {f['message']}")
        lines += [f"      {line}" if i else f"      fix: {line}" for i, line in enumerate(f["fix"].splitlines())]
    return "\n".join(lines)


def _publish_line(root: dict[str, Any]) -> str:
    text = f"published {root.get('version') or ''}".rstrip() if root["published"] else "not published"
    if root.get("last_publish_failed"):
        text += "; the last publish failed"
    if root.get("interrupted"):
        text += "; a publish was interrupted"
    return text


@app.command("status")
def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="print the state as one JSON document")] = False,
) -> None:
    """Show platform, NVIDIA modules, the image's userspace, the driver root and findings.

    Exit status: 0 without error findings, 1 with one, 2 on usage errors.
    """
    from driver_container.findings import has_errors
    from driver_container.inspect.hoststate import inspect_host
    from driver_container.settings import Settings

    paths = host_paths(ctx)
    state = inspect_host(paths, Settings.from_env())
    if as_json:
        typer.echo(json.dumps(state.to_json(), indent=2, sort_keys=False))
    else:
        typer.echo(render_text(state))
    raise typer.Exit(1 if has_errors(state.findings) else 0)
