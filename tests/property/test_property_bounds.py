"""Memory stays bounded: decompression bombs and huge claimed sizes hit the cap, not the allocator."""

from __future__ import annotations

import gzip
import lzma
import struct
from collections.abc import Callable

import pytest
from helpers.cost import peak_bytes
from helpers.fuzz_targets import MODULE_CAP

from driver_container.base.errors import HostReadError, ModuleFormatError
from driver_container.formats.ldcache import parse_ld_cache
from driver_container.readers.kmod import read_module

BOMB_SIZE = 64 << 20  # 64 MiB of zeros: 64x the cap, compresses to a few KiB


def _zstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=1).compress(data)


def _refuses(error: type[Exception], call: Callable[..., object], *args: object, **kw: object) -> Callable[[], None]:
    def run() -> None:
        with pytest.raises(error):
            call(*args, **kw)

    return run


@pytest.fixture(scope="module")
def zeros() -> bytes:
    return bytes(BOMB_SIZE)


@pytest.mark.parametrize(
    "compress",
    [lambda d: lzma.compress(d, preset=0), lambda d: gzip.compress(d, compresslevel=1), _zstd],
    ids=["xz", "gzip", "zstd"],
)
def test_decompression_bomb_hits_the_cap(zeros: bytes, compress: Callable[[bytes], bytes]) -> None:
    bomb = compress(zeros)
    assert len(bomb) < MODULE_CAP // 2  # gzip tops out near 1000:1
    raised: list[ModuleFormatError] = []

    def run() -> None:
        with pytest.raises(ModuleFormatError) as info:
            read_module(bomb, max_size=MODULE_CAP, filename="bomb.ko")
        raised.append(info.value)

    peak = peak_bytes(run)
    assert "cap" in raised[0].message or "larger" in raised[0].message or "over" in raised[0].message, raised[0].message
    # The cap plus decoder chunks, never the 64 MiB the stream expands to.
    assert peak < 4 * MODULE_CAP, f"peak {peak} bytes while decompressing a bomb with a {MODULE_CAP}-byte cap"


def test_zstd_frame_claiming_a_huge_size_is_refused_cheaply() -> None:
    # RFC 8878, 3.1.1: magic, descriptor 0xE0 (8-byte content size, single segment), content size 2**62,
    # then one last raw block of 64 bytes. The decoder must not trust the claimed size for allocation.
    block = (1 | (64 << 3)).to_bytes(3, "little")
    frame = b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", 1 << 62) + block + b"\x7fELF" + bytes(60)
    peak = peak_bytes(_refuses(ModuleFormatError, read_module, frame, max_size=MODULE_CAP))
    assert peak < 4 * MODULE_CAP


def test_input_over_the_cap_is_refused_before_parsing() -> None:
    with pytest.raises(ModuleFormatError, match="cap"):
        read_module(b"\x7fELF" + bytes(MODULE_CAP), max_size=MODULE_CAP)


def test_ld_cache_with_huge_entry_count_is_refused_cheaply() -> None:
    # New-format header (glibc elf/cache.c): magic, version, nlibs; nlibs far beyond the file size.
    data = b"glibc-ld.so.cache1.1" + struct.pack("<I", 0xFFFFFFFF) + bytes(40)
    peak = peak_bytes(_refuses(HostReadError, parse_ld_cache, data))
    assert peak < 1 << 20
