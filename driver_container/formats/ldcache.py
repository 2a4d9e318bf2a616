"""ld.so.cache reader: a pure parser of glibc's cache formats and ld.so's lookup rule.

Layouts (glibc 2.36 sysdeps/generic/dl-cache.h, elf/cache.c):

- new format (glibc >= 2.32 writes only this): a 48-byte header ``glibc-ld.so.cache1.1``, nlibs,
  len_strings, an endianness flags byte, the extension offset; then nlibs 24-byte entries
  (flags, key, value, osversion, hwcap); string offsets count from the header start.
- old format ``ld.so-1.7.0``: 12-byte header + nlibs, 12-byte entries (flags, key, value). Alone, its
  string offsets count from the end of its entries. In "compat" caches a new-format section follows
  the old entries (aligned to 8) and both sets of offsets count from the new header, which is also
  where ld.so reads from, so the new section is the one returned.

``lookup`` reproduces ld.so's binary search (elf/dl-cache.c ``search_cache``), so an unsorted cache
that ``ldconfig -p`` still prints finds nothing here either, exactly as ld.so would behave.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from driver_container.errors import LdCacheFormatError
from driver_container.records import NamedRecord

NEW_MAGIC = b"glibc-ld.so.cache1.1"
OLD_MAGIC = b"ld.so-1.7.0"
NEW_HEADER = 48
OLD_HEADER = 16  # 11-byte magic padded to 12, then uint32 nlibs
NEW_ENTRY = 24
OLD_ENTRY = 12

# Entry flags accepted by ld.so (dl-cache.h FLAG_ELF_LIBC6 | FLAG_<ARCH>_LIB64; exact equality,
# sysdeps/*/dl-cache.h _dl_cache_check_flags).
FLAGS_X86_64 = 0x0303
FLAGS_AARCH64 = 0x0A03
FLAGS_BY_MACHINE = {"x86_64": FLAGS_X86_64, "aarch64": FLAGS_AARCH64}
# Where glibc's ld.so and ldconfig keep the cache, inside a root (elf/dl-cache.h LD_SO_CACHE = SYSCONFDIR
# "/ld.so.cache"): the image's userspace and the published DRIVER_ROOT alike.
LD_SO_CACHE = "etc/ld.so.cache"
# Read bound for a cache: a distribution image's is ~100 KiB; 64 MiB only stops a hostile file.
LD_SO_CACHE_LIMIT = 64 << 20

# cache_file_new.flags endianness values (dl-cache.h): 0 unset (pre-2.33, host order), 2 little, 3 big.
_ENDIAN = {0: "<", 2: "<", 3: ">"}


class CacheEntry(NamedRecord):
    flags: int
    key: str  # the SONAME
    value: str  # the library path, as seen inside the root the cache belongs to
    osversion: int = 0
    hwcap: int = 0


def _fail(source: str, what: str) -> LdCacheFormatError:
    return LdCacheFormatError(
        f"{source}: not a valid ld.so.cache: {what}",
        path=source,
        fix="regenerate it with `ldconfig` (or `ldconfig -r ROOT`)",
    )


def _string(data: bytes, start: int, offset: int, source: str) -> str:
    pos = start + offset
    if offset < 0 or pos >= len(data):
        raise _fail(source, f"string offset {offset} beyond the end ({len(data)} bytes)")
    end = data.find(b"\0", pos)
    if end < 0:
        raise _fail(source, f"string at offset {offset} is not NUL-terminated")
    return data[pos:end].decode("utf-8", errors="surrogateescape")


def _parse_new(data: bytes, base: int, source: str) -> list[CacheEntry]:
    if len(data) < base + NEW_HEADER:
        raise _fail(source, f"new-format header truncated at {len(data)} bytes")
    endian = _ENDIAN.get(data[base + 28] & 3)
    if endian is None:
        raise _fail(source, f"invalid endianness flags {data[base + 28]:#x}")
    nlibs, _len_strings = struct.unpack_from(endian + "II", data, base + 20)
    end = base + NEW_HEADER + nlibs * NEW_ENTRY
    if end > len(data):
        raise _fail(source, f"{nlibs} entries do not fit in {len(data)} bytes")
    entries = []
    for i in range(nlibs):
        flags, key, value, osv, hwcap = struct.unpack_from(endian + "iIIIQ", data, base + NEW_HEADER + i * NEW_ENTRY)
        entries.append(
            CacheEntry(flags, _string(data, base, key, source), _string(data, base, value, source), osv, hwcap)
        )
    return entries


def _parse_old(data: bytes, source: str) -> tuple[list[CacheEntry], int]:
    """Old-format entries and the offset just past them."""
    if len(data) < OLD_HEADER:
        raise _fail(source, f"old-format header truncated at {len(data)} bytes")
    (nlibs,) = struct.unpack_from("<I", data, 12)
    end = OLD_HEADER + nlibs * OLD_ENTRY
    if end > len(data):
        raise _fail(source, f"{nlibs} old-format entries do not fit in {len(data)} bytes")
    raw = [struct.unpack_from("<iII", data, OLD_HEADER + i * OLD_ENTRY) for i in range(nlibs)]
    entries = [CacheEntry(f, _string(data, end, k, source), _string(data, end, v, source)) for f, k, v in raw]
    return entries, end


def parse_ld_cache(data: bytes, *, source: str = "ld.so.cache") -> list[CacheEntry]:
    """Entries of a cache in file order (the order ld.so binary-searches). ``source`` names the file in errors."""
    if data.startswith(NEW_MAGIC):
        return _parse_new(data, 0, source)
    if not data.startswith(OLD_MAGIC):
        raise _fail(source, f"unknown magic {data[:20]!r}")
    old_entries, end = _parse_old(data, source)
    new_base = (end + 7) & ~7  # ALIGN_CACHE to __alignof__(struct cache_file_new)
    if data[new_base : new_base + len(NEW_MAGIC)] == NEW_MAGIC:
        return _parse_new(data, new_base, source)
    return old_entries


def _compare_digit_runs(run1: bytes, run2: bytes) -> int:
    """Numeric order of two ASCII digit runs without int(): a hostile library name with thousands of
    digits must neither build a huge integer nor hit Python's int-digits limit (ValueError)."""
    run1, run2 = run1.lstrip(b"0") or b"0", run2.lstrip(b"0") or b"0"
    if len(run1) != len(run2):
        return len(run1) - len(run2)
    return (run1 > run2) - (run1 < run2)


def libcmp(a: str, b: str) -> int:
    """glibc ``_dl_cache_libcmp``: byte order, but runs of digits compare as numbers; digits sort after others."""
    p1, p2 = a.encode() + b"\0", b.encode() + b"\0"
    i = j = 0
    while p1[i] != 0:
        c1, c2 = p1[i], p2[j]
        if 48 <= c1 <= 57:
            if not 48 <= c2 <= 57:
                return 1
            i2, j2 = i, j
            while 48 <= p1[i2] <= 57:
                i2 += 1
            while 48 <= p2[j2] <= 57:
                j2 += 1
            order = _compare_digit_runs(p1[i:i2], p2[j:j2])
            if order:
                return order
            i, j = i2, j2
        elif 48 <= c2 <= 57:
            return -1
        elif c1 != c2:
            return c1 - c2
        else:
            i += 1
            j += 1
    return -p2[j]


def lookup(entries: Sequence[CacheEntry], soname: str, flags_filter: int = FLAGS_X86_64) -> CacheEntry | None:
    """The entry ld.so would pick for ``soname``: binary search, then the first entry of that name whose
    flags equal ``flags_filter`` exactly. Entries restricted by hwcap (legacy bits or glibc-hwcaps
    subdirectories) depend on the CPU and are skipped: the baseline entry is what every CPU can load."""
    left, right = 0, len(entries) - 1
    while left <= right:
        middle = (left + right) // 2
        cmp = libcmp(soname, entries[middle].key)
        if cmp == 0:
            while middle > 0 and libcmp(soname, entries[middle - 1].key) == 0:
                middle -= 1
            for entry in entries[middle:]:
                if libcmp(soname, entry.key) != 0:
                    break
                if entry.flags == flags_filter and entry.hwcap == 0:
                    return entry
            return None
        if cmp < 0:  # the cache is sorted in descending libcmp order
            left = middle + 1
        else:
            right = middle - 1
    return None
