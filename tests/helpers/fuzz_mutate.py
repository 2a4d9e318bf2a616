"""A hypothesis strategy for mutated real samples: flips, truncations, insertions, splices, and
overwrites of 1-8 byte fields with boundary integers (the values that break length and offset checks)."""

from __future__ import annotations

import struct

from hypothesis import strategies as st

BOUNDARY = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)


@st.composite
def mutated(draw: st.DrawFn, sample: bytes) -> bytes:
    data = bytearray(sample)
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            data.extend(draw(st.binary(min_size=1, max_size=16)))
            continue
        pos = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(("flip", "truncate", "insert", "delete", "field", "dup")))
        if op == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=32))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 64))]
        elif op == "dup":
            data[pos:pos] = data[pos : pos + draw(st.integers(1, 256))]
        else:
            width = draw(st.sampled_from((1, 2, 4, 8)))
            value = draw(st.sampled_from(BOUNDARY)) & ((1 << (8 * width)) - 1)
            endian = draw(st.sampled_from("<>"))
            fmt = {1: "B", 2: "H", 4: "I", 8: "Q"}[width]
            data[pos : pos + width] = struct.pack(endian + fmt, value)
    return bytes(data)
