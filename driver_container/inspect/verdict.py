"""The module-file verdict that ``driver-manager`` hands to ``init`` through RUN_DIR.

In the operator's driver pod only the init container (``driver-manager``) gets the host's ``/`` at
``/host``; the main container (``nvidia-driver init``) does not (NVIDIA/gpu-operator a22dbf67,
manifests/state-driver/0500_daemonset.yaml and assets/state-driver/0500_daemonset.yaml). Both mount
``/run/nvidia``. So the manager reads the module files Talos loaded and writes what it found to
``RUN_DIR/nvidia-driver.module-verdict.json``; ``init``, when it finds no module files itself, takes the
files' facts from there and runs its own checks on them (a file that differs from the loaded module
stops ``init`` as if it had read the file).

A verdict is bound to what it was made for: this boot (``/proc/sys/kernel/random/boot_id``, new at every
boot; /run is empty after a reboot on Talos anyway, but not on every host), the operator's
``DRIVER_CONFIG_DIGEST`` and the kernel release. Anything else - another boot, digest or release, another
format version, a file that does not parse - is ignored with a warning, never trusted and never fatal.
The writer's image version is recorded but not compared: the module files' facts do not depend on any
userspace, and the manager image may lag the driver image (``driver.manager.version``), which must not
leave ``init`` without the files' check. Pure parsing (``parse_verdict``) is separate from the I/O.
"""

from __future__ import annotations

import json
import logging
from pathlib import PurePosixPath
from typing import Any, get_args

from driver_container.base.errors import DriverContainerError, JsonFormatError, VerdictFormatError
from driver_container.base.paths import HostPaths
from driver_container.base.records import NamedRecord
from driver_container.base.resolver import Root
from driver_container.formats.boundedjson import decode_json
from driver_container.formats.kernel.nvidia_proc import ModuleFlavour
from driver_container.inspect.modfiles import ModuleFile

log = logging.getLogger(__name__)

FORMAT = "talos-nvidia-driver/module-verdict"
FORMAT_VERSION = 1
VERDICT_FILE = "nvidia-driver.module-verdict.json"  # in RUN_DIR, beside nvidia-driver.state
VERDICT_LIMIT = 1 << 20  # a verdict names a handful of module files: a few KiB
BOOT_ID = "sys/kernel/random/boot_id"  # under PROCFS_ROOT
# Finding codes about module files (findings.modules.file_checks), shown by `status` as the writer saw them.
FILE_FINDINGS = ("MODULE_FILE_MISMATCH", "MODULE_FILE_UNREADABLE", "VERMAGIC_MISMATCH", "MODULE_FILE_MISSING")
_STR_FIELDS = ("version", "srcversion", "vermagic", "license", "signer", "error")


class Binding(NamedRecord):
    """What a verdict is valid for: boot id, digest and kernel release must match the reader's."""

    boot_id: str | None
    digest: str | None  # DRIVER_CONFIG_DIGEST (None outside the operator)
    image_version: str | None  # the writer's NVIDIA userspace version (recorded, not compared)
    kernel_release: str | None


class Verdict(NamedRecord):
    binding: Binding
    module_files: dict[str, ModuleFile]
    findings: tuple[str, ...]  # "CODE: message" of the writer's checks, for `status`
    written_by: str = "driver-manager"


# -- pure -----------------------------------------------------------------------------------------


def render_verdict(verdict: Verdict) -> str:
    files = [
        {**{k: v for k, v in f._asdict().items() if k != "path"}, "path": str(f.path)}
        for f in sorted(verdict.module_files.values(), key=lambda f: f.name)
    ]
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "written_by": verdict.written_by,
        **verdict.binding._asdict(),
        "module_files": files,
        "findings": list(verdict.findings),
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def _str_or_none(record: dict[str, Any], key: str) -> str | None:
    value = record.get(key)
    if value is not None and not isinstance(value, str):
        raise VerdictFormatError(f"{key}: expected a string, got {type(value).__name__}", key=key)
    return value


def _int_or_none(record: dict[str, Any], key: str) -> int | None:
    value = record.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 16):
        raise VerdictFormatError(f"{key}: expected an ELF machine number, got {value!r:.40}", key=key)
    return value


def _flavour_or_none(record: dict[str, Any]) -> ModuleFlavour | None:
    value = record.get("flavour")
    if value is not None and value not in get_args(ModuleFlavour):
        raise VerdictFormatError(f"flavour: expected one of {', '.join(get_args(ModuleFlavour))}, got {value!r:.40}")
    return value


def _module_file(record: object) -> ModuleFile:
    if not isinstance(record, dict):
        raise VerdictFormatError("module_files: entries must be objects", key="module_files")
    name, path = _str_or_none(record, "name"), _str_or_none(record, "path")
    if not name or not path:
        raise VerdictFormatError("module_files: an entry without name or path", key="module_files")

    def strings(key: str) -> tuple[str, ...]:
        value = record.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise VerdictFormatError(f"{key}: expected a list of strings", key=key)
        return tuple(value)

    text = {k: _str_or_none(record, k) for k in _STR_FIELDS}
    return ModuleFile(
        path=PurePosixPath(path),
        name=name,
        version=text["version"],
        srcversion=text["srcversion"],
        vermagic=text["vermagic"],
        license=text["license"],
        firmware=strings("firmware"),
        parameters=strings("parameters"),
        signer=text["signer"],
        error=text["error"],
        machine=_int_or_none(record, "machine"),
        flavour=_flavour_or_none(record),
    )


def parse_verdict(text: str) -> Verdict:
    """The document written by ``render_verdict``; VerdictFormatError for anything else."""
    try:
        doc = decode_json(text, limit=VERDICT_LIMIT)
    except JsonFormatError as exc:  # also too deep, too large, not UTF-8
        raise VerdictFormatError(str(exc)) from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise VerdictFormatError(f"not a {FORMAT} document", key="format")
    if doc.get("format_version") != FORMAT_VERSION:
        raise VerdictFormatError(
            f"format_version {doc.get('format_version')!r}, this image reads {FORMAT_VERSION}", key="format_version"
        )
    binding = Binding(**{k: _str_or_none(doc, k) for k in ("boot_id", "digest", "image_version", "kernel_release")})
    records = doc.get("module_files")
    findings = doc.get("findings", [])
    if not isinstance(records, list) or not isinstance(findings, list):
        raise VerdictFormatError("module_files and findings must be lists", key="module_files")
    files = {f.name: f for f in map(_module_file, records)}
    return Verdict(binding, files, tuple(str(f) for f in findings), str(doc.get("written_by", "?")))


def stale_reason(verdict: Binding, current: Binding) -> str | None:
    """Why a verdict does not apply here, or None when it does."""
    if current.boot_id is None:
        return f"this boot's id ({BOOT_ID}) is unreadable"
    for what in ("boot_id", "digest", "kernel_release"):
        theirs, ours = getattr(verdict, what), getattr(current, what)
        if theirs != ours:
            return f"it was made for {what} {theirs!r}, this is {ours!r}"
    return None


# -- I/O ------------------------------------------------------------------------------------------


def current_binding(proc: Root, digest: str | None, image_version: str | None, kver: str | None) -> Binding:
    try:
        boot = (proc.read_text_or_none(BOOT_ID, limit=256) or "").strip() or None
    except DriverContainerError:
        boot = None
    return Binding(boot, digest, image_version, kver)


def load_verdict(paths: HostPaths, current: Binding) -> Verdict | None:
    """The verdict in RUN_DIR when it applies to ``current``; None (with one warning) otherwise."""
    where = paths.run_dir / VERDICT_FILE
    try:
        text = paths.run.read_text_or_none(VERDICT_FILE, limit=VERDICT_LIMIT)
        if text is None:
            return None
        verdict = parse_verdict(text)
    except DriverContainerError as exc:
        log.warning("%s: ignored, %s", where, exc.message)
        return None
    reason = stale_reason(verdict.binding, current)
    if reason is not None:
        log.warning("%s: stale verdict of %s ignored: %s", where, verdict.written_by, reason)
        return None
    return verdict


def adopt_verdict(
    paths: HostPaths, digest: str | None, image_version: str | None, kver: str
) -> tuple[dict[str, ModuleFile], str]:
    """Module files from driver-manager's verdict for ``init`` without a host root, and their source."""
    verdict = load_verdict(paths, current_binding(paths.proc, digest, image_version, kver))
    if verdict is None:
        return {}, "none"
    where = paths.run_dir / VERDICT_FILE
    names = ", ".join(verdict.module_files) or "none"
    log.info("module files as %s read them this boot (%s): %s", verdict.written_by, where, names)
    return dict(verdict.module_files), f"{verdict.written_by} verdict {where}"
