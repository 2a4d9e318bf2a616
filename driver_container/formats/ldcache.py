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

import re
import struct
from collections import Counter
from collections.abc import Sequence

from driver_container.base.errors import LdCacheFormatError
from driver_container.base.records import NamedRecord

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

# Work caps: parsing is linear in the file, whatever its offsets say. Real caches (measured): 91-153
# entries in the driver images, 540 on a Debian workstation; names up to 58 bytes, paths up to 80.
MAX_ENTRIES = 1 << 16  # 100x a workstation's cache; ldconfig itself has no cap
MAX_NAME = 255  # a key is a SONAME, a file name ld.so opens: NAME_MAX (linux/limits.h)
MAX_PATH = 4096  # a value is a path ld.so opens: PATH_MAX (linux/limits.h)
# Text decoded in all: each distinct string offset is decoded once; 16 MiB is ~250 bytes for each of
# MAX_ENTRIES entries, ~25x a real cache's per-entry text, and stops tails of one long string.
MAX_DECODED = 16 << 20
# Entries of one name (libcmp-equal): one per flags x hwcap subdirectory in a real cache (i386 + x86_64,
# glibc-hwcaps x86-64-v2/v3/v4: at most ~8); ld.so walks that run, and so does ``lookup``.
MAX_SAME_NAME = 64

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


class _Strings:
    """The cache's strings, each offset decoded once, within MAX_DECODED bytes in all."""

    def __init__(self, data: bytes, start: int, source: str) -> None:
        self.data, self.start, self.source = data, start, source
        self.decoded: dict[tuple[int, int], str] = {}
        self.total = 0

    def get(self, offset: int, limit: int, what: str) -> str:
        text = self.decoded.get((offset, limit))
        if text is not None:
            return text
        data, pos = self.data, self.start + offset
        if offset < 0 or pos >= len(data):
            raise _fail(self.source, f"string offset {offset} beyond the end ({len(data)} bytes)")
        end = data.find(b"\0", pos, pos + limit + 1)
        if end < 0:
            if pos + limit + 1 <= len(data):
                raise _fail(self.source, f"{what} at offset {offset} is longer than {limit} bytes")
            raise _fail(self.source, f"string at offset {offset} is not NUL-terminated")
        self.total += end - pos
        if self.total > MAX_DECODED:
            raise _fail(self.source, f"its strings decode to over {MAX_DECODED} bytes")
        text = data[pos:end].decode("utf-8", errors="surrogateescape")
        self.decoded[offset, limit] = text
        return text

    def entry(self, flags: int, key: int, value: int, osversion: int = 0, hwcap: int = 0) -> CacheEntry:
        return CacheEntry(flags, self.get(key, MAX_NAME, "name"), self.get(value, MAX_PATH, "path"), osversion, hwcap)


def _count(nlibs: int, source: str) -> None:
    if nlibs > MAX_ENTRIES:
        raise _fail(source, f"{nlibs} entries, over the cap of {MAX_ENTRIES}")


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
    _count(nlibs, source)
    strings = _Strings(data, base, source)
    rows = struct.Struct(endian + "iIIIQ").iter_unpack(data[base + NEW_HEADER : end])
    return _checked([strings.entry(*row) for row in rows], source)


def _parse_old(data: bytes, source: str) -> tuple[list[CacheEntry], int]:
    """Old-format entries and the offset just past them."""
    if len(data) < OLD_HEADER:
        raise _fail(source, f"old-format header truncated at {len(data)} bytes")
    (nlibs,) = struct.unpack_from("<I", data, 12)
    end = OLD_HEADER + nlibs * OLD_ENTRY
    if end > len(data):
        raise _fail(source, f"{nlibs} old-format entries do not fit in {len(data)} bytes")
    _count(nlibs, source)
    strings = _Strings(data, end, source)
    return [strings.entry(*row) for row in struct.Struct("<iII").iter_unpack(data[OLD_HEADER:end])], end


# libcmp treats digit runs as numbers, so "lib01" and "lib1" are one name: drop leading zeros of a run.
_LEADING_ZEROS = r"(?<![0-9])0+(?=[0-9])"  # compiled on first use (re's cache): not at import


def _checked(entries: list[CacheEntry], source: str) -> list[CacheEntry]:
    """Refuse a cache with a run of one name that no real cache has (``lookup`` walks such a run)."""
    if not entries:
        return entries
    name, count = Counter(re.sub(_LEADING_ZEROS, "", e.key) for e in entries).most_common(1)[0]
    if count > MAX_SAME_NAME:
        raise _fail(source, f"{count} entries for the name {name[:80]!r}, over the cap of {MAX_SAME_NAME}")
    return entries


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
    return _checked(old_entries, source)


def _compare_digit_runs(run1: bytes, run2: bytes) -> int:
    """Numeric order of two ASCII digit runs without int(): a hostile library name with thousands of
    digits must neither build a huge integer nor hit Python's int-digits limit (ValueError)."""
    run1, run2 = run1.lstrip(b"0") or b"0", run2.lstrip(b"0") or b"0"
    if len(run1) != len(run2):
        return len(run1) - len(run2)
    return (run1 > run2) - (run1 < run2)


def libcmp(a: str, b: str) -> int:
    """glibc ``_dl_cache_libcmp``: byte order, but runs of digits compare as numbers; digits sort after others."""
    if a == b:  # the common answer of ``lookup``'s walk over a run of one name, without the loop below
        return 0
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
