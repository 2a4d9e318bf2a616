"""A minimal DER (X.690) reader: enough to walk a PKCS#7 SignedData.

Only definite lengths are accepted (DER forbids the indefinite form) and every length is checked
against the enclosing buffer, so hostile input raises ``DerError`` instead of reading past the end.
"""

from __future__ import annotations

from typing import NamedTuple

from driver_container.errors import DerError
from driver_container.formats.numbers import parse_uint

_MAX_LENGTH_BYTES = 4  # lengths above 4 GiB cannot occur inside a module signature


class Tlv(NamedTuple):
    # A NamedTuple, not a frozen dataclass: ~20 are made per module and frozen __init__ is slow.
    tag: int  # the identifier octet (class, constructed bit, low tag number)
    value: bytes

    @property
    def constructed(self) -> bool:
        return bool(self.tag & 0x20)


def _read(data: bytes, pos: int) -> tuple[Tlv, int]:
    if pos + 2 > len(data):
        raise DerError(f"truncated DER element at offset {pos}", offset=pos)
    tag = data[pos]
    if tag & 0x1F == 0x1F:
        raise DerError(f"multi-byte DER tag at offset {pos} is not supported", offset=pos)
    first = data[pos + 1]
    pos += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > _MAX_LENGTH_BYTES:
            raise DerError(f"unsupported DER length form 0x{first:02x}", offset=pos - 1)
        if pos + count > len(data):
            raise DerError("truncated DER length", offset=pos)
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > len(data):
        raise DerError(f"DER element of {length} bytes runs past the end of its container", offset=pos)
    return Tlv(tag, data[pos : pos + length]), pos + length


def parse_one(data: bytes) -> Tlv:
    """The first element of ``data`` (trailing bytes are ignored, as OpenSSL's d2i does)."""
    return _read(data, 0)[0]


def children(tlv: Tlv) -> list[Tlv]:
    """The elements inside a constructed element."""
    if not tlv.constructed:
        raise DerError(f"DER element with tag 0x{tlv.tag:02x} is not constructed")
    out: list[Tlv] = []
    pos = 0
    while pos < len(tlv.value):
        item, pos = _read(tlv.value, pos)
        out.append(item)
    return out


def oid_text(tlv: Tlv) -> str:
    """Dotted text of an OBJECT IDENTIFIER."""
    if tlv.tag != 0x06 or not tlv.value:
        raise DerError(f"expected an OBJECT IDENTIFIER, found tag 0x{tlv.tag:02x}")
    arcs: list[int] = []
    value = 0
    for byte in tlv.value:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if tlv.value[-1] & 0x80:
        raise DerError("truncated OBJECT IDENTIFIER")
    first = min(arcs[0] // 40, 2)
    return ".".join(str(a) for a in (first, arcs[0] - 40 * first, *arcs[1:]))


def encode_oid(text: str) -> bytes:
    """The DER contents of an OBJECT IDENTIFIER (for comparing raw bytes instead of decoding)."""
    parsed = [parse_uint(a) for a in text.split(".")]
    arcs = [a for a in parsed if a is not None]
    if len(arcs) < 2 or len(arcs) != len(parsed):
        raise DerError(f"not a dotted OBJECT IDENTIFIER: {text[:40]!r}")
    out = bytearray()
    for arc in [40 * arcs[0] + arcs[1], *arcs[2:]]:
        chunk = [arc & 0x7F]
        rest = arc >> 7
        while rest:
            chunk.append(0x80 | (rest & 0x7F))
            rest >>= 7
        out += bytes(reversed(chunk))
    return bytes(out)
