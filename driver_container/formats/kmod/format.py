"""Printing a ``ModuleInfo`` exactly as kmod's ``modinfo`` does (kmod 30, tools/modinfo.c).

- ``filename:`` first, then every entry in section order (``"%s:%-*s%s"`` with the key and colon
  padded to 16 columns), except ``parm``/``parmtype``, which are merged per name and printed last.
- The signature follows the ``.modinfo`` entries as kmod's ``kmod_module_get_info`` appends it:
  sig_id, signer, sig_key, sig_hashalgo, signature; binary values as ``%02X`` joined by ``:`` with
  ``\\n\\t\\t`` after every 20 bytes (kmod_module_hex_to_str).
- ``-F FIELD`` prints only the values; ``-F parm`` prints ``name:desc (type)`` without the label;
  ``-F filename`` prints only the file name. ``-0`` ends every record with NUL instead of newline and
  prints ``key=value``, keeping ``filename:`` and ``parm:`` in the padded form, as kmod does.
"""

from __future__ import annotations

from typing import Any

from driver_container.formats.kmod.model import ModuleInfo, ModuleParameter, Signature, merge_parameters

_HEX_LINE = 20  # bytes per line in kmod_module_hex_to_str


def hex_folded(raw: bytes) -> str:
    """``01:AB:...`` with a ``\\n\\t\\t`` continuation after every 20 bytes."""
    text = raw.hex(":").upper()
    step = 3 * _HEX_LINE  # "XX:" per byte; every full line keeps its trailing ':'
    return "\n\t\t".join(text[i : i + step] for i in range(0, len(text), step))


def signature_entries(signature: Signature) -> list[tuple[str, str]]:
    return [
        ("sig_id", signature.sig_id),
        ("signer", signature.signer),
        ("sig_key", hex_folded(signature.sig_key)),
        ("sig_hashalgo", signature.sig_hashalgo),
        ("signature", hex_folded(signature.signature)),
    ]


def all_entries(info: ModuleInfo) -> list[tuple[str, str]]:
    """What kmod's ``kmod_module_get_info`` returns: .modinfo entries, then the signature's."""
    entries = list(info.fields)
    if info.signature is not None:
        entries.extend(signature_entries(info.signature))
    return entries


def _parm_value(param: ModuleParameter) -> str:
    if param.description is None:
        return f"{param.name}: ({param.type})" if param.type is not None else f"{param.name}:"
    if param.type is not None:
        return f"{param.name}:{param.description} ({param.type})"
    return f"{param.name}:{param.description}"


def _parm_line(param: ModuleParameter) -> str:
    # The full listing prints a parameter without description as "name:type" (no parentheses).
    if param.description is None:
        return f"{param.name}:{param.type or ''}"
    return _parm_value(param)


def format_modinfo(info: ModuleInfo, *, field: str | None = None, null: bool = False) -> bytes:
    """The bytes kmod's ``modinfo [-F field] [-0]`` writes to stdout for this file."""
    end = "\0" if null else "\n"
    filename = info.filename or "(unknown)"
    if field == "filename":
        return _encode(filename + end)
    entries = all_entries(info)
    if field == "parm":
        params = merge_parameters(entries)
        return _encode("".join(_parm_value(p) + end for p in params))
    if field is not None:
        return _encode("".join(value + end for key, value in entries if key == field))
    out = [f"{'filename:':<16}{filename}{end}"]
    for key, value in entries:
        if key in ("parm", "parmtype"):
            continue
        if null:
            out.append(f"{key}={value}{end}")
        else:
            # printf("%s:%-*s%s"): a negative width (keys over 15 chars) pads by its absolute value.
            out.append(f"{key}:{' ' * abs(15 - len(key))}{value}{end}")
    out.extend(f"{'parm:':<16}{_parm_line(p)}{end}" for p in merge_parameters(entries))
    return _encode("".join(out))


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def to_json(info: ModuleInfo) -> dict[str, Any]:
    """A stable, program-friendly form of the same data (``--json``)."""
    signature = info.signature
    return {
        "filename": info.filename,
        "name": info.name,
        "compression": info.compression,
        "fields": [[k, v] for k, v in info.fields],
        "version": info.version,
        "srcversion": info.srcversion,
        "vermagic": info.vermagic,
        "license": info.license,
        "firmware": info.firmware,
        "parameters": [
            {"name": p.name, "description": p.description, "type": p.type} for p in info.parameters.values()
        ],
        "signature": None
        if signature is None
        else {
            "sig_id": signature.sig_id,
            "signer": signature.signer,
            "sig_key": signature.sig_key.hex(":").upper(),
            "sig_hashalgo": signature.sig_hashalgo,
            "signature": signature.signature.hex(":").upper(),
            "algo": signature.algo,
            "hash": signature.hash,
            "id_type": signature.id_type,
        },
    }
