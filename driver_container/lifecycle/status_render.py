"""The ``status`` document and its text form, built from a ``HostState`` and its findings (the only place
that turns the host picture into JSON keys: docs/status.md). lifecycle/status.py collects them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from driver_container.driverroot.mount import is_ours
from driver_container.driverroot.procsys import OPT_IN, PROC_MPS

if TYPE_CHECKING:
    from driver_container.driverroot.procsys import ProcSys
    from driver_container.driverroot.state import RootState
    from driver_container.driverroot.toolkit_features import ToolkitFeature
    from driver_container.findings import Finding
    from driver_container.formats.kernel.mountinfo import Mount
    from driver_container.formats.kernel.pci import PciFunction
    from driver_container.inspect.hoststate import HostState, LoadedModule


def status_json(state: HostState, findings: list[Finding], absent: tuple[ToolkitFeature, ...] = ()) -> dict[str, Any]:
    """The ``status --json`` document (keys documented in docs/status.md)."""
    return {
        "platform": {
            "name": state.platform.name,
            "talos_version": state.platform.talos_version,
            "evidence": state.platform.evidence,
            "kernel_release": state.platform.kernel_release,
            "os_id": state.platform.os_id,
            "pretty_name": state.platform.pretty_name,
        },
        "modules": [_module_json(state, m) for m in state.modules.values()],
        "module_files_source": state.module_files_source,
        "nvidia": {
            "version": state.nvidia_version.version if state.nvidia_version else None,
            "flavour": state.nvidia_version.flavour if state.nvidia_version else None,
            "gpus": [
                {"pci_id": g.pci_id, "model": g.model, "uuid": g.uuid, "device_minor": g.device_minor}
                for g in state.gpus
            ],
        },
        "pci_gpus": [_pci_gpu_json(state, g) for g in state.pci_gpus],
        "userspace": {
            "version": state.userspace.version,
            "root": str(state.userspace.root),
            "source": state.userspace.source,
            "libcuda": str(state.userspace.libcuda) if state.userspace.libcuda else None,
            "library_dirs": [str(d) for d in state.userspace.library_dirs],
        },
        "requested_parameters": {m: dict(p) for m, p in state.requested_params.items()},
        "firmware": state.firmware,
        "driver_root": {
            "path": str(state.root.path),
            "published": state.root.published,
            "version": state.root.version,
            "last_publish_failed": state.root.failure is not None,
            "interrupted": state.root.interrupted,
            "not_in_image": [{"name": f.name, "loses": f.loses} for f in absent],
        }
        | _mount_json(state.root),
        "fabric": state.fabric.to_json() if state.fabric is not None else None,
        "findings": [{"severity": f.severity, "code": f.code, "message": f.message, "fix": f.fix} for f in findings],
    }


def _mount_json(root: RootState) -> dict[str, Any]:
    m, flags, proof = root.mount, root.flags, root.proof
    shown: dict[str, Any] = {
        "flags": None if flags is None else {"path": flags.path, "noexec": flags.noexec, "nodev": flags.nodev},
        "usable": None if proof is None else {"ok": proof.ok, "failures": list(proof.failures)},
    }
    shown["proc_sys"] = _proc_sys_json(root.proc_sys)
    return {"mount": None if m is None else _mount_keys(m) | {"ours": is_ours(m)}} | shown


def _mount_keys(m: Mount) -> dict[str, Any]:
    return {"mount_point": m.mount_point, "fstype": m.fstype, "source": m.source, "options": list(m.options)}


def _proc_sys_json(found: ProcSys | None) -> dict[str, Any] | None:
    """The root's shell and what is mounted at its proc and sys (driverroot/procsys.py); None: no mount table."""
    if found is None:
        return None
    mounts = {"proc": found.proc, "sys": found.sys}
    return {"shell": found.shell} | {k: None if m is None else _mount_keys(m) for k, m in mounts.items()}


def _proc_word(proc: dict[str, Any] | None) -> str:
    """The root's procfs in the text form: none, ours of the opt-in (named), or any other (a warning)."""
    if proc is None:
        return "none (the root is data)"
    if proc["source"] == PROC_MPS.source:
        return f"{OPT_IN} ({','.join(proc['options'])})"
    return "MOUNTED"


def _pci_gpu_json(state: HostState, gpu: PciFunction) -> dict[str, Any]:
    """A GPU on the PCI bus, what each module flavour does with it and the last branch that drives it, from
    the image's supported-gpus.json where it lists the id, else the table (formats/gpu_support.py)."""
    support = state.support_of(gpu.device)
    return {
        "address": gpu.address,
        "pci_id": gpu.pci_id,
        "class": f"0x{gpu.pci_class:06x}",
        "driver": gpu.driver,
        "generation": support.generation if support else None,
        "open": support.open if support else "unknown",
        "proprietary": support.proprietary if support else "unknown",
        "last_branch": support.last_branch if support else None,
        "name": support.name if support else "",
        "rules": support.source if support else None,
    }


def _last_branch(gpu: dict[str, Any]) -> str:
    return "" if gpu["last_branch"] is None else f", last branch {gpu['last_branch']}"


def _module_json(state: HostState, module: LoadedModule) -> dict[str, Any]:
    file = state.module_files.get(module.name)
    return {
        "name": module.name,
        "loaded": module.loaded,
        "builtin": module.builtin,
        "state": module.state,
        "version": module.version,
        "srcversion": module.srcversion,
        "refcnt": module.refcnt,
        "holders": list(module.holders),
        "taint": module.taint,
        "file": str(file.path) if file else None,
        "file_version": file.version if file else None,
        "file_srcversion": file.srcversion if file else None,
        "file_flavour": file.flavour if file else None,
    }


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


def render_text(state: HostState, findings: list[Finding], absent: tuple[ToolkitFeature, ...] = ()) -> str:
    """The human form of ``status_json``."""
    doc = status_json(state, findings, absent)
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
    lines += [
        f"PCI GPU {g['address']} {g['pci_id']} {g['generation'] or 'unknown generation'}: open modules "
        f"{g['open']}, proprietary {g['proprietary']}{_last_branch(g)} (driver {g['driver'] or 'none'})"
        for g in doc["pci_gpus"]
    ]
    lines.append(f"userspace: {us['version'] or 'not found'} (root {us['root']}, {us['libcuda'] or us['source']})")
    lines.append(f"driver root: {root['path']} ({_publish_line(root)})")
    if root["mount"]:
        m = root["mount"]
        lines.append(f"  mount {m['mount_point']} {m['fstype']} {m['source']} {','.join(m['options'])}")
    if root["usable"] is not None:
        lines.append(f"  usable: {'yes (executed and mapped from it)' if root['usable']['ok'] else 'NO'}")
    if root["proc_sys"] is not None and (root["proc_sys"]["shell"] or root["proc_sys"]["proc"]):
        shown = [
            "proc " + _proc_word(root["proc_sys"]["proc"]),
            "sys " + ("mounted" if root["proc_sys"]["sys"] else "NOT mounted"),
        ]
        lines.append(f"  chroot (bin/sh): {', '.join(shown)}")
    lines += [f"  not in the image: {f['name']}: {f['loses']}" for f in root["not_in_image"]]
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
