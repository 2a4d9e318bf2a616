"""The one JSON decoder for every document the program reads (state files, the image's index, the verdict).

``json.loads`` recurses once per nesting level and raises RecursionError on ~10 KB of ``[`` (CPython's C
scanner, Modules/_json.c ``scan_once_unicode`` with ``Py_EnterRecursiveCall``), which is not a ValueError,
so callers that treat a ValueError as damage let it escape. Here the size and the nesting depth are
checked first, by a scan linear in the input that skips string contents, so json never sees a document
deeper than ``max_depth``; every way a document can be wrong ends in one ``JsonFormatError`` (a
ValueError), never in RecursionError, UnicodeDecodeError or a value of the wrong type.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

from driver_container.base.errors import JsonFormatError

MAX_DEPTH = 32  # the deepest document we write is 4 levels (manifest: body, files, record, elf)

_STRUCTURE_ONLY = bytes(c for c in range(256) if c not in b'"[]{}')  # bytes.translate deletes the rest
# Possessive, one way to match: linear; unterminated runs to the end. A pattern, not compiled at import: the
# manifest read on every restart never needs it (re compiles it on first use and caches it).
_QUOTED = rb'"[^"]*+(?:"|\Z)'
_SPLIT_MAX = 1 << 20
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def nesting_depth(text: str | bytes) -> int:
    """The deepest nesting of arrays and objects outside string literals, in a few passes at C speed
    (~0.1 ms for a 57 KB manifest, about 1 s for 16 MiB of brackets or quotes).

    Escapes go first: ``\\\\`` pairs, then ``\\"`` (a run of backslashes pairs up from its start, as JSON
    reads it); then every byte but quotes and brackets (UTF-8 continuation bytes are never ASCII); then
    the quoted runs, which are exactly the string literals. Outside strings a backslash is not JSON:
    json.loads stops there, and everything before it was counted exactly."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if b"\\" in data:  # our own documents have none: two scans saved on the hot path
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    structure = data.translate(None, _STRUCTURE_ONLY)
    return max(accumulate(map(_STEP.__getitem__, _outside_strings(structure))), default=0)


def _outside_strings(structure: bytes) -> bytes:
    """``structure`` (quotes and brackets only) without its string literals."""
    if len(structure) <= _SPLIT_MAX:  # every other piece between quotes is outside a string (~10x the regex)
        return b"".join(structure.split(b'"')[::2])
    return re.sub(_QUOTED, b"", structure)  # without a list of up to 16 Mi pieces


def _refuse_constant(name: str) -> Any:
    raise JsonFormatError(f"{name} is not a JSON number")


def decode_json(data: bytes | str, *, limit: int, max_depth: int = MAX_DEPTH) -> Any:
    """The value in ``data`` (UTF-8 when bytes): at most ``limit`` bytes (characters for text) and
    ``max_depth`` levels of nesting; JsonFormatError, saying what is wrong, for anything else."""
    if len(data) > limit:
        raise JsonFormatError(f"larger than {limit} bytes")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise JsonFormatError(f"not UTF-8 (byte {exc.start})") from None
    depth = nesting_depth(text)
    if depth > max_depth:
        raise JsonFormatError(f"nested {depth} levels deep (at most {max_depth})")
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:  # RecursionError: cannot happen below max_depth; kept as damage
        raise JsonFormatError(f"not JSON ({str(exc)[:200]})") from None


def decode_object(data: bytes | str, *, limit: int, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """``decode_json`` of a document whose top level must be an object."""
    value = decode_json(data, limit=limit, max_depth=max_depth)
    if not isinstance(value, dict):
        raise JsonFormatError(f"a {type(value).__name__} where an object belongs")
    return value
