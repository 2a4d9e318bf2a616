"""ld.so.cache parser and lookup, checked against caches written by the real glibc ldconfig (the oracle
is ``ldconfig -p -C FILE``: every line it prints must be an entry we parsed, in the same order)."""

from __future__ import annotations

import contextlib
import random
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from helpers.support import require
from hypothesis import given, settings
from hypothesis import strategies as st

from driver_container.base.errors import HostReadError
from driver_container.formats.ldcache import (
    FLAGS_AARCH64,
    FLAGS_X86_64,
    CacheEntry,
    LdCacheFormatError,
    libcmp,
    lookup,
    parse_ld_cache,
)

PRINT_LINE = re.compile(r"^\t(\S+) \(([^)]*)\) => (\S+)$")


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tiny shared objects with NVIDIA-like SONAMEs (versioned file, major-version SONAME)."""
    require(shutil.which("gcc") and shutil.which("ldconfig"), "gcc and ldconfig", how="apt-get install gcc")
    lib = tmp_path_factory.mktemp("cachelib")
    src = lib / "a.c"
    src.write_text("int f(void) { return 1; }\n")
    for file, soname in (
        ("libcuda.so.595.91.07", "libcuda.so.1"),
        ("libnvidia-glcore.so.595.91.07", "libnvidia-glcore.so.595.91.07"),
    ):
        cmd = ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(lib / file), str(src)]
        subprocess.run(cmd, check=True)
    src.unlink()
    return lib


def write_cache(libdir: Path, tmp_path: Path, fmt: str) -> Path:
    conf = tmp_path / "ld.so.conf"
    conf.write_text(f"{libdir}\n")
    cache = tmp_path / f"cache.{fmt}"
    subprocess.run(["ldconfig", "-c", fmt, "-C", str(cache), "-f", str(conf)], check=True)
    return cache


def printed(cache: Path) -> list[tuple[str, str, str]]:
    out = subprocess.run(["ldconfig", "-p", "-C", str(cache)], check=True, capture_output=True, text=True).stdout
    return [m.groups() for m in map(PRINT_LINE.match, out.splitlines()) if m]  # type: ignore[union-attr]


@pytest.mark.parametrize("fmt", ["new", "old", "compat"])
def test_matches_ldconfig_print(libdir: Path, tmp_path: Path, fmt: str) -> None:
    cache = write_cache(libdir, tmp_path, fmt)
    entries = parse_ld_cache(cache.read_bytes(), source=str(cache))
    oracle = printed(cache)
    assert [(e.key, e.value) for e in entries] == [(k, v) for k, _flags, v in oracle]
    x86 = [e for e, (_k, flags, _v) in zip(entries, oracle, strict=True) if flags == "libc6,x86-64"]
    assert x86 and all(e.flags == FLAGS_X86_64 for e in x86)


@pytest.mark.parametrize("fmt", ["new", "old", "compat"])
def test_lookup_finds_published_libraries(libdir: Path, tmp_path: Path, fmt: str) -> None:
    entries = parse_ld_cache(write_cache(libdir, tmp_path, fmt).read_bytes())
    cuda = lookup(entries, "libcuda.so.1", FLAGS_X86_64)
    assert cuda is not None and cuda.value == f"{libdir}/libcuda.so.1"
    glcore = lookup(entries, "libnvidia-glcore.so.595.91.07", FLAGS_X86_64)
    assert glcore is not None and glcore.value == f"{libdir}/libnvidia-glcore.so.595.91.07"
    assert lookup(entries, "libcuda.so.1", FLAGS_AARCH64) is None
    assert lookup(entries, "libcuda.so.2", FLAGS_X86_64) is None


def test_every_printed_entry_is_found_by_binary_search(libdir: Path, tmp_path: Path) -> None:
    entries = parse_ld_cache(write_cache(libdir, tmp_path, "new").read_bytes())
    for entry in entries:
        if entry.flags == FLAGS_X86_64 and entry.hwcap == 0:
            found = lookup(entries, entry.key, FLAGS_X86_64)
            assert found is not None and found.key == entry.key


def test_shuffled_cache_loses_libraries_like_ld_so(libdir: Path, tmp_path: Path) -> None:
    """ld.so binary-searches: a shuffled cache hides entries even though each is still present."""
    entries = parse_ld_cache(write_cache(libdir, tmp_path, "new").read_bytes())
    shuffled = list(entries)
    random.Random(4).shuffle(shuffled)
    missing = [e for e in shuffled if e.flags == FLAGS_X86_64 and lookup(shuffled, e.key) is None]
    assert missing


def test_compat_cache_returns_new_section(libdir: Path, tmp_path: Path) -> None:
    data = write_cache(libdir, tmp_path, "compat").read_bytes()
    assert data.startswith(b"ld.so-1.7.0")
    assert b"glibc-ld.so.cache1.1" in data
    assert parse_ld_cache(data) == parse_ld_cache(write_cache(libdir, tmp_path, "new").read_bytes())


def test_libcmp_compares_digit_runs_as_numbers() -> None:
    assert libcmp("libfoo.so.10", "libfoo.so.9") > 0
    assert libcmp("libfoo.so.9", "libfoo.so.10") < 0
    assert libcmp("libfoo.so.01", "libfoo.so.1") == 0
    assert libcmp("liba1", "libab") > 0  # digits sort after any other byte
    assert libcmp("libab", "liba1") < 0
    assert libcmp("libc.so", "libc.so.6") < 0


def new_cache(entries: list[tuple[int, str, str]]) -> bytes:
    strings = bytearray()
    offsets = []
    base = 48 + 24 * len(entries)
    for _flags, key, value in entries:
        offsets.append((base + len(strings), base + len(strings) + len(key) + 1))
        strings += key.encode() + b"\0" + value.encode() + b"\0"
    head = b"glibc-ld.so.cache1.1" + struct.pack("<IIB3xI12x", len(entries), len(strings), 2, 0)
    body = b"".join(struct.pack("<iIIIQ", f, k, v, 0, 0) for (f, _k, _v), (k, v) in zip(entries, offsets, strict=True))
    return head + body + bytes(strings)


def test_first_matching_flags_wins_and_other_arches_are_skipped() -> None:
    data = new_cache([(FLAGS_AARCH64, "libx.so.1", "/arm/libx.so.1"), (FLAGS_X86_64, "libx.so.1", "/x86/libx.so.1")])
    entries = parse_ld_cache(data)
    assert entries[0] == CacheEntry(FLAGS_AARCH64, "libx.so.1", "/arm/libx.so.1")
    assert lookup(entries, "libx.so.1", FLAGS_X86_64) == entries[1]
    assert lookup(entries, "libx.so.1", FLAGS_AARCH64) == entries[0]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "unknown magic"),
        (b"not a cache at all", "unknown magic"),
        (b"glibc-ld.so.cache1.1" + b"\0" * 10, "header truncated"),
        (b"glibc-ld.so.cache1.1" + struct.pack("<IIB3xI12x", 1000, 0, 2, 0), "1000 entries do not fit"),
        (b"ld.so-1.7.0\0" + struct.pack("<I", 5), "5 old-format entries"),
    ],
)
def test_malformed_caches_name_the_problem(data: bytes, message: str) -> None:
    with pytest.raises(LdCacheFormatError, match=message) as info:
        parse_ld_cache(data, source="/run/nvidia/driver/etc/ld.so.cache")
    assert "/run/nvidia/driver/etc/ld.so.cache" in info.value.message
    assert isinstance(info.value, HostReadError) and info.value.fix


def test_string_offset_out_of_range() -> None:
    data = bytearray(new_cache([(FLAGS_X86_64, "liby.so.1", "/y")]))
    struct.pack_into("<I", data, 48 + 4, 10_000)
    with pytest.raises(LdCacheFormatError, match="string offset 10000 beyond the end"):
        parse_ld_cache(bytes(data))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from([b"", b"glibc-ld.so.cache1.1", b"ld.so-1.7.0\0"]))
def test_arbitrary_bytes_raise_only_format_errors(tail: bytes, magic: bytes) -> None:
    with contextlib.suppress(LdCacheFormatError):
        parse_ld_cache(magic + tail)
