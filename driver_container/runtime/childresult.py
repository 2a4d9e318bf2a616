"""What a forked child sends its parent through the pipe: ``(kind, value)``, kind "ok" or "error".

A plain result (the published version: a str) goes as ``marshal``, which is built into the interpreter;
anything else (an exception with its structured fields) as ``pickle``, imported only then. ``import
pickle`` alone is ~2.5 ms, which an unchanged restart never pays (bench/startup.py). Both ends are this
process and its fork, so neither format is read from anything untrusted.
"""

from __future__ import annotations

import marshal
from typing import Any, cast

_MARSHAL, _PICKLE = b"M", b"P"


def encode_result(payload: tuple[str, object]) -> bytes:
    try:
        # marshal writes only exact built-in types (a NamedTuple or a str subclass is refused): what it
        # writes reads back as the same value and type.
        return _MARSHAL + marshal.dumps(cast(Any, payload))
    except ValueError:  # refused: exceptions, class instances, subclasses
        import pickle  # lazy, hot path: an unchanged restart's child returns a str

        return _PICKLE + pickle.dumps(payload)


def decode_result(data: bytes) -> tuple[str, Any]:
    """``(kind, value)``; ("died", None) for nothing, or for bytes neither format reads back."""
    try:
        if data[:1] == _MARSHAL:
            kind, value = marshal.loads(data[1:])
        elif data[:1] == _PICKLE:
            import pickle  # lazy, hot path: see encode_result

            kind, value = pickle.loads(data[1:])
        else:
            return "died", None
    except Exception:
        return "died", None
    return (kind, value) if isinstance(kind, str) else ("died", None)
