"""A minimal DER (X.690) reader: enough to walk a PKCS#7 SignedData.

Only definite lengths are accepted (DER forbids the indefinite form) and every length is checked
against the enclosing buffer, so hostile input raises ``DerError`` instead of reading past the end.
"""

from __future__ import annotations

from driver_container.base.errors import DerError
from driver_container.formats.numbers import parse_uint

_MAX_LENGTH_BYTES = 4  # lengths above 4 GiB cannot occur inside a module signature
# Contents of an OBJECT IDENTIFIER decoded to text: the OIDs of a module signature are 3-10 bytes. An arc
# is built by shifting, quadratic in its length: a 200 KB OID took 17 s before Python's int-to-text cap.
MAX_OID_BYTES = 64

# One element as offsets into the buffer it was read from: (identifier octet, start of its contents, end
# of its contents). Offsets, not a record holding a slice: a module's signature is ~20 elements, a module
# tree has thousands of modules, and a record plus a copy per element would be ~a third of modinfo's
# library time over the Debian tree (bench/modinfo.py).
Element = tuple[int, int, int]


def element(data: bytes, pos: int = 0, end: int | None = None) -> Element:
    """The element at ``pos``, which must end by ``end`` (default: the end of ``data``).

    Trailing bytes after it are the caller's business (OpenSSL's d2i ignores them).
    """
    end = len(data) if end is None else end
    if pos + 2 > end:
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
        if pos + count > end:
            raise DerError("truncated DER length", offset=pos)
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > end:
        raise DerError(f"DER element of {length} bytes runs past the end of its container", offset=pos)
    return tag, pos, pos + length


def inside(data: bytes, outer: Element) -> list[Element]:
    """The elements inside a constructed element, each checked to end within it."""
    tag, pos, end = outer
    if not tag & 0x20:
        raise DerError(f"DER element with tag 0x{tag:02x} is not constructed", offset=pos)
    out: list[Element] = []
    while pos < end:
        item = element(data, pos, end)
        out.append(item)
        pos = item[2]
    return out


def contents(data: bytes, item: Element) -> bytes:
    return data[item[1] : item[2]]


def oid_text(value: bytes) -> str:
    """Dotted text of an OBJECT IDENTIFIER's contents."""
    if not value:
        raise DerError("empty OBJECT IDENTIFIER")
    if len(value) > MAX_OID_BYTES:
        raise DerError(f"OBJECT IDENTIFIER of {len(value)} bytes (over {MAX_OID_BYTES})")
    arcs: list[int] = []
    arc = 0
    for byte in value:
        arc = (arc << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(arc)
            arc = 0
    if value[-1] & 0x80:
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
