"""Crafted inputs whose parse cost grew faster than their size: each parser's work is now linear in its
input, with caps on counts and on decoded bytes (the caps are module constants next to each parser).

The guarantee (README): every input is handled within 10 s. Each case here is a small file that held a
parser for far longer, or made it allocate far more than its size; the bounds below are checked by time
with a wide margin (a fixed parser answers in well under a second; the old one took minutes) or by
counting work (tracemalloc's peak) where the cost was memory.
"""

from __future__ import annotations

import contextlib
import gzip
import lzma
import os
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from elfdyn import build_dynamic_elf
from helpers.cost import elapsed, peak_bytes
from helpers.hostenv import make_host

from driver_container.base.errors import (
    DriverContainerError,
    ElfFormatError,
    LdCacheFormatError,
    ModuleFormatError,
    ModuleNotFoundInTreeError,
)
from driver_container.base.resolver import Root
from driver_container.formats.elffacts import ElfDeps
from driver_container.formats.kernel.fabric import GpuFabric, parse_fabric_states
from driver_container.formats.kernel.kmsg import parse_kmsg
from driver_container.formats.ldcache import FLAGS_X86_64, NEW_ENTRY, NEW_HEADER, NEW_MAGIC, lookup, parse_ld_cache
from driver_container.formats.talos_config import parse_talos_version, uses_kernel_module_config
from driver_container.publish.closure import resolve_closure
from driver_container.publish.model import SourceFile
from driver_container.publish.sources import ElfFacts
from driver_container.readers.elf import read_elf_deps
from driver_container.readers.kmod import find_module, read_module

FAST = 2.0  # seconds: a crafted input's whole parse; the fixed parsers take milliseconds
SMALL = 16 << 20  # bytes of peak allocation allowed for a parse of a crafted file of ~100 KiB
LD_CACHE_TEXT = 16 << 20  # the decoded-text budget of an ld.so.cache (ldcache.MAX_DECODED, docs/publish.md)


def _raises_or_returns(error: type[Exception], call: Callable[..., object], *args: object) -> Callable[[], None]:
    """A refusal through the project's hierarchy is fine; nothing else may escape."""

    def run() -> None:
        with contextlib.suppress(error):
            call(*args)

    return run


# -- kernel modules: the section-name lookup --------------------------------------------------------------


def _module_with_many_name_hits(sections: int, hits: int) -> bytes:
    """An ELF64 ET_REL whose section name table holds ``hits`` copies of ".modinfo\\0" that no section
    names: the old lookup searched the whole section list for every copy (sections x hits)."""
    names = b"\0" + b".modinfo\0" * hits
    shoff = 64 + len(names) + (-len(names) % 8)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, sections, 1)
    null = struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    strtab = struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, 64, len(names), 0, 0, 1, 0)
    body = ehdr + names + bytes(-len(names) % 8)
    return body + null + strtab + null * (sections - 2)


@pytest.mark.timeout(20)
def test_module_whose_name_table_repeats_a_wanted_name_is_read_in_linear_time() -> None:
    module = _module_with_many_name_hits(sections=65535, hits=200_000)
    packed = lzma.compress(module, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32)
    assert len(packed) < 4096  # a few KiB on disk (5.8 MB unpacked): the old lookup took minutes
    took = elapsed(_raises_or_returns(ModuleFormatError, read_module, packed))
    assert took < FAST, f"{took:.1f} s for a {len(packed)}-byte module"


def _module(modinfo: bytes, sections: int = 4) -> bytes:
    """An ELF64 ET_REL: null, .shstrtab, ``sections - 4`` sections named "shstrtab" (a tail of a name, no
    wanted one), then two named ".modinfo" holding ``modinfo``."""
    names = b"\0.modinfo\0.shstrtab\0"
    data_off = 64 + len(names) + (-len(names) % 8)
    shoff = data_off + len(modinfo) + (-len(modinfo) % 8)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, sections, 1)
    row = "<IIQQQQIIQQ"
    table = [struct.pack(row, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), struct.pack(row, 10, 3, 0, 0, 64, len(names), 0, 0, 1, 0)]
    table += [struct.pack(row, 11, 1, 0, 0, 64, 0, 0, 0, 1, 0)] * (sections - 4)
    table += [struct.pack(row, 1, 1, 0, 0, data_off, len(modinfo), 0, 0, 1, 0)] * 2
    body = ehdr + names + bytes(-len(names) % 8) + modinfo + bytes(-len(modinfo) % 8)
    return body + b"".join(table)


def test_module_whose_wanted_section_is_last_of_many_is_found() -> None:
    """The linear lookup keeps kmod's rule: the lowest section index whose name is the wanted one."""
    info = read_module(_module(b"license=GPL\0name=late\0", sections=4000))
    assert info.name == "late" and ("license", "GPL") in info.fields


# -- ld.so.cache ---------------------------------------------------------------------------------------------


def _ld_cache(entries: list[tuple[int, int, int]], strings: bytes) -> bytes:
    """A new-format cache (glibc dl-cache.h cache_file_new): entries (flags, key, value) whose offsets
    count from the header start; ``strings`` follow the entries."""
    start = NEW_HEADER + len(entries) * NEW_ENTRY
    header = NEW_MAGIC + struct.pack("<II", len(entries), len(strings)) + bytes([2]) + bytes(19)
    rows = b"".join(struct.pack("<iIIIQ", f, start + k, start + v, 0, 0) for f, k, v in entries)
    return header + rows + strings


def _names(count: int) -> tuple[bytes, list[int]]:
    """``count`` distinct library names, NUL-terminated, and their offsets."""
    names = [b"lib%06d.so\0" % i for i in range(count)]
    return b"".join(names), [len(names[0]) * i for i in range(count)]


def test_ld_cache_whose_entries_share_one_long_string_is_decoded_once() -> None:
    # 16384 entries whose path is the same 4000-byte string: a ~600 KiB file the old parser decoded
    # 16384 times (64 MiB of str objects); each distinct string offset is now decoded once.
    names, offsets = _names(16384)
    path = b"/" + b"l" * 3998 + b"\0"
    data = _ld_cache([(FLAGS_X86_64, o, len(names)) for o in offsets], names + path)
    peak = peak_bytes(lambda: parse_ld_cache(data))
    assert peak < SMALL, f"{peak >> 20} MiB to parse a {len(data) >> 10} KiB cache"


def test_ld_cache_whose_entries_point_into_long_strings_is_refused_within_a_byte_budget() -> None:
    # Distinct offsets into 32 long paths: entry i decodes a tail of ~3500 bytes, 110 MiB of text from
    # a 1 MiB file; the parser stops at MAX_DECODED (16 MiB) of decoded text.
    names, offsets = _names(32768)
    path = b"/" + b"l" * 4094 + b"\0"
    paths = path * 32
    rows = [(FLAGS_X86_64, o, len(names) + (i // 1024) * len(path) + i % 1024) for i, o in enumerate(offsets)]
    data = _ld_cache(rows, names + paths)
    peak = peak_bytes(_raises_or_returns(LdCacheFormatError, parse_ld_cache, data))
    assert peak < LD_CACHE_TEXT + (8 << 20), f"{peak >> 20} MiB to parse a {len(data) >> 10} KiB cache"
    with pytest.raises(LdCacheFormatError, match="decode to over"):
        parse_ld_cache(data)


def _parse_then_look_up(data: bytes, name: str, times: int) -> Callable[[], None]:
    def run() -> None:
        try:
            entries = parse_ld_cache(data)
        except LdCacheFormatError as exc:
            assert "entries for the name" in exc.message
            return
        for _ in range(times):
            lookup(entries, name, FLAGS_X86_64)

    return run


@pytest.mark.timeout(30)
def test_ld_cache_with_a_long_run_of_one_name_is_refused() -> None:
    # Every entry has the same long name and flags ld.so would not take: each lookup walked the whole
    # run comparing names character by character in Python (16384 x 2 x 255 characters, each time).
    key = b"lib" + b"9" * 249 + b".so\0"
    data = _ld_cache([(0x0A03, 0, 0)] * 16384, key)
    took = elapsed(_parse_then_look_up(data, key[:-1].decode(), 20))
    assert took < FAST, f"{took:.1f} s for 20 lookups in a {len(data) >> 10} KiB cache"


@pytest.mark.timeout(60)
def test_ld_cache_with_a_long_run_of_names_equal_as_numbers_is_refused() -> None:
    # libcmp compares digit runs as numbers: "lib01.2.so" and "lib1.002.so" are one name, so distinct
    # spellings make one run too (4096 here), which no exact-string check would notice.
    keys = [b"lib" + b"0" * a + b"1." + b"0" * b + b"2.so\0" for a in range(64) for b in range(64)]
    strings = b"".join(keys)
    offsets = [sum(len(k) for k in keys[:i]) for i in range(len(keys))]
    data = _ld_cache([(0x0A03, o, o) for o in offsets], strings)
    took = elapsed(_parse_then_look_up(data, "lib1.2.so", 500))
    assert took < FAST, f"{took:.1f} s for 500 lookups in a {len(data) >> 10} KiB cache"


def test_ld_cache_name_longer_than_a_file_name_is_refused() -> None:
    key = b"lib" + b"x" * 300 + b".so\0"
    with pytest.raises(LdCacheFormatError, match="longer than"):
        parse_ld_cache(_ld_cache([(FLAGS_X86_64, 0, 0)], key))


# -- ELF dynamic sections ---------------------------------------------------------------------------------


def test_elf_whose_needed_entries_share_one_long_string_is_refused_cheaply() -> None:
    # 8192 DT_NEEDED entries naming one 4000-byte string: a 136 KiB file that decoded 32 MiB of text.
    name = b"lib" + b"x" * 3997
    base = build_dynamic_elf(needed=(name,))
    data = _with_repeated_needed(base, 8192)
    peak = peak_bytes(_raises_or_returns(ElfFormatError, read_elf_deps, data))
    assert peak < SMALL, f"{peak >> 20} MiB to parse a {len(data) >> 10} KiB ELF file"
    with pytest.raises(ElfFormatError, match="DT_NEEDED"):
        read_elf_deps(data)


def _with_repeated_needed(elf: bytes, count: int) -> bytes:
    """``elf`` (from build_dynamic_elf, one DT_NEEDED first in its dynamic array) with that DT_NEEDED
    entry repeated ``count`` times: the dynamic array is moved to the end and PT_LOAD/PT_DYNAMIC grown."""
    phoff, phnum = 64, struct.unpack_from("<H", elf, 0x38)[0]
    phdrs = [list(struct.unpack_from("<IIQQQQQQ", elf, phoff + 56 * i)) for i in range(phnum)]
    dynamic = next(p for p in phdrs if p[0] == 2)
    tags = elf[dynamic[2] : dynamic[2] + dynamic[5]]
    new_dynamic = tags[:16] * count + tags[16:]
    body = elf[: dynamic[2]]
    for p in phdrs:
        if p[0] == 1:  # PT_LOAD covers the whole file at vaddr 0
            p[5] = p[6] = len(body) + len(new_dynamic)
        if p[0] == 2:
            p[5] = p[6] = len(new_dynamic)
    table = b"".join(struct.pack("<IIQQQQQQ", *p) for p in phdrs)
    return body[:phoff] + table + body[phoff + len(table) :] + new_dynamic


def test_elf_runpath_with_many_directories_is_refused() -> None:
    runpath = b":".join(b"/d%d" % i for i in range(4000))
    with pytest.raises(ElfFormatError, match="DT_RUNPATH"):
        read_elf_deps(build_dynamic_elf(needed=(b"libc.so.6",), runpath=runpath))


# -- the DT_NEEDED closure ----------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_closure_of_many_needed_names_times_many_runpath_dirs_is_bounded(tmp_path: Path) -> None:
    # ELF facts also come from the manifest and the image's index (JSON on disk), so the closure must
    # bound its own work: 2000 missing names x 2000 RUNPATH dirs was 4 million path lookups per start.
    lib = tmp_path / "usr/lib/x86_64-linux-gnu/libnvidia-hostile.so.1"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(build_dynamic_elf(needed=(b"libc.so.6",)))
    facts = ElfDeps(
        machine="EM_X86_64",
        elf_class=64,
        elf_type="ET_DYN",
        interpreter=None,
        soname="libnvidia-hostile.so.1",
        needed=tuple(f"libmissing{i}.so" for i in range(2000)),
        runpath=tuple(f"/opt/d{i}" for i in range(2000)),
    )
    user = SourceFile(lib, "USERSPACE_ROOT/hostile", 1, 1, 0o644, facts)
    root = Root(tmp_path).snapshot()

    def run() -> None:
        try:
            closure = resolve_closure(root, "x86_64-linux-gnu", [], set(), [], [user], ElfFacts())
        except DriverContainerError as exc:
            assert "lookups" in exc.message
        else:
            assert len(closure.missing) == 2000

    took = elapsed(run)
    assert took < FAST, f"{took:.1f} s to resolve one object's DT_NEEDED names"


def test_closure_tries_a_missing_name_once_for_many_objects_with_the_same_search_path(tmp_path: Path) -> None:
    # 400 optional objects lacking the same 20 names through the same 10 directories: tried once (320
    # lookups), not per object (128000, over the closure's budget); each object still records its loss.
    needed = tuple(f"libgone{i}.so" for i in range(20))
    runpath = tuple(f"/opt/d{i}" for i in range(10))
    users = []
    for i in range(400):
        lib = tmp_path / f"usr/lib/x86_64-linux-gnu/libnvidia-opt{i}.so.1"
        lib.parent.mkdir(parents=True, exist_ok=True)
        lib.write_bytes(b"")
        facts = ElfDeps("EM_X86_64", 64, "ET_DYN", None, lib.name, needed, runpath)
        users.append(SourceFile(lib, f"USERSPACE_ROOT/{lib.name}", 0, 1, 0o644, facts))
    closure = resolve_closure(Root(tmp_path).snapshot(), "x86_64-linux-gnu", [], set(), [], users, ElfFacts())
    assert len(closure.missing) == 400 * 20


# -- kernel modules: compression and signatures ------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["xz", "gzip"])
def test_module_of_many_concatenated_streams_is_refused_in_linear_time(kind: str) -> None:
    # Each stream restarted the decoder on a copy of the rest of the file: quadratic in the file.
    empty = lzma.compress(b"", check=lzma.CHECK_NONE) if kind == "xz" else gzip.compress(b"", mtime=0)
    data = empty * (5_000_000 // len(empty))
    took = elapsed(_raises_or_returns(ModuleFormatError, read_module, data))
    assert took < FAST, f"{took:.1f} s for a {len(data) >> 20} MiB {kind} file of {len(data) // len(empty)} streams"
    with pytest.raises(ModuleFormatError, match="concatenated"):
        read_module(data)


def test_module_of_a_few_concatenated_xz_streams_is_read() -> None:
    module = _module(b"license=GPL\0name=split\0")
    third = len(module) // 3
    parts = (module[:third], module[third : 2 * third], module[2 * third :])
    data = b"".join(lzma.compress(p, check=lzma.CHECK_CRC32) + bytes(4) for p in parts)
    assert read_module(data).name == "split"


def _der(tag: int, body: bytes) -> bytes:
    return bytes([tag, 0x84]) + struct.pack(">I", len(body)) + body


@pytest.mark.timeout(120)
def test_module_signature_with_a_huge_object_identifier_is_refused_at_once() -> None:
    # One OID arc of 400 KB: decoding it shifted a growing integer once per byte (quadratic, ~70 s).
    signature = _der(0x30, _der(0x06, b"\xff" * 400_000 + b"\x7f") + _der(0xA0, b""))
    trailer = struct.pack(">BBBBB3xI", 1, 4, 2, 0, 0, len(signature))
    data = b"\x7fELF" + bytes(60) + signature + trailer + b"~Module signature appended~\n"
    took = elapsed(_raises_or_returns(ModuleFormatError, read_module, data))
    assert took < FAST, f"{took:.1f} s for a {len(data) >> 10} KiB module"


# -- numbers in host text ------------------------------------------------------------------------------------


def test_talos_version_of_thousands_of_digits_is_not_a_version() -> None:
    # int() of over 4300 digits raises ValueError: the os-release VERSION_ID must not reach it.
    assert parse_talos_version("v" + "1" * 5000 + ".14.0") is None
    assert not uses_kernel_module_config("v1." + "4" * 5000)
    assert parse_talos_version("v\u0661.\u0661\u0664.0") is None  # Arabic-Indic digits are no version
    assert parse_talos_version("v1.14.0-beta.0") == (1, 14, "beta.0")


def test_kmsg_record_with_thousands_of_digits_is_malformed_not_an_error() -> None:
    messages, malformed = parse_kmsg(b"6," + b"9" * 5000 + b",3,-;NVRM: x\n6,1,2,-;NVRM: ok\n")
    assert [m.text for m in messages] == ["NVRM: ok"] and malformed == 1


@pytest.mark.timeout(120)
def test_fabric_state_output_with_a_long_blank_line_parses_in_linear_time() -> None:
    # `nvidia-smi -q` comes from the image; the old key-value pattern backtracked cubically on blanks
    # (3000 blanks: ~35 s inside one C call, so SIGTERM waited too).
    text = "GPU 00000000:01:00.0\n    Fabric\n" + " " * 3000 + "\n        State : Completed\n        Status : Success\n"
    took = elapsed(lambda: parse_fabric_states(text))
    assert took < FAST, f"{took:.1f} s for {len(text)} bytes of nvidia-smi -q"
    assert parse_fabric_states(text) == [GpuFabric("00000000:01:00.0", "Completed", "Success")]


def test_fabric_state_key_value_lines_keep_their_meaning() -> None:
    text = "GPU 0000:01:00.0\n  Fabric\n    State   :   In Progress  \n    Status: N/A\n  Other : x\n"
    assert parse_fabric_states(text) == [GpuFabric("0000:01:00.0", "In Progress", "N/A")]


def _remove_deep_dirs(top: Path) -> None:
    """Remove the ``a/a/...`` chain below ``top`` one level at a time (shutil.rmtree, and so pytest's
    cleanup of old temporary dirs, recurses once per level and fails on 2000): the second level is moved
    up in place of the first, which is then empty."""
    while (top / "a").is_dir():
        if (top / "a/a").is_dir():
            os.rename(top / "a/a", top / "next")
            os.rmdir(top / "a")
            os.rename(top / "next", top / "a")
        else:
            os.rmdir(top / "a")


@pytest.fixture
def deep_dirs() -> Iterator[Callable[[Path, int], str]]:
    made: list[Path] = []

    def make(top: Path, depth: int) -> str:
        made.append(top)
        return _deep_dirs(top, depth)

    yield make
    for top in made:
        _remove_deep_dirs(top)


def _deep_dirs(top: Path, depth: int) -> str:
    """``depth`` nested directories ``a/a/...`` below ``top`` (made through descriptors: the path is longer
    than PATH_MAX); returns the in-root path of the deepest."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("a", dir_fd=fd)
            inner = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    return "/" + "/".join(["a"] * depth)


@pytest.mark.timeout(120)
def test_closure_through_very_deep_runpath_directories_is_bounded(
    tmp_path: Path, deep_dirs: Callable[[Path, int], str]
) -> None:
    # One existing RUNPATH directory 2000 levels deep: each lookup resolved 2000 components by their whole
    # prefix (~55 ms), for each of 1000 missing names.
    deep = deep_dirs(tmp_path, 2000)
    lib = tmp_path / "usr/lib/x86_64-linux-gnu/libnvidia-deep.so.1"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    needed = tuple(f"libabsent{i}.so" for i in range(1000))
    facts = ElfDeps("EM_X86_64", 64, "ET_DYN", None, lib.name, needed, (deep,))
    user = SourceFile(lib, "USERSPACE_ROOT/deep", 0, 1, 0o644, facts)
    root = Root(tmp_path).snapshot()
    took = elapsed(lambda: resolve_closure(root, "x86_64-linux-gnu", [], set(), [], [user], ElfFacts()))
    assert took < FAST, f"{took:.1f} s to look up 1000 names through one deep directory"


@pytest.mark.timeout(300)
def test_init_with_an_ld_cache_of_very_deep_paths_is_bounded(
    tmp_path: Path, deep_dirs: Callable[[Path, int], str]
) -> None:
    # The image's ld.so.cache names 1500 libraries in directories 500 to 2000 levels deep, all existing:
    # the scan resolved each entry's directory, ~30 ms apiece.
    h = make_host(tmp_path / "h")
    deep = deep_dirs(h.userspace, 2000)
    names, offsets = _names(1500)
    paths = [f"{deep[: 2 * (500 + i)]}/lib{i:06d}.so".encode() + b"\0" for i in range(1500)]
    values = [len(names) + sum(len(p) for p in paths[:i]) for i in range(len(paths))]
    cache = _ld_cache([(FLAGS_X86_64, o, v) for o, v in zip(offsets, values, strict=True)], names + b"".join(paths))
    (h.userspace / "etc/ld.so.cache").write_bytes(cache)
    started = time.monotonic()
    done = h.run("init", "--no-wait", timeout=240)
    took = time.monotonic() - started
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert took < 10, f"init took {took:.0f} s; {done.stderr[-2000:]}"


@pytest.mark.timeout(120)
def test_modinfo_lookup_in_a_huge_modules_dep_is_refused_quickly(tmp_path: Path) -> None:
    # 64 MiB of three-byte lines, the old read limit: the line-by-line search took ~17 s.
    tree = tmp_path / "lib/modules/6.1.0-test"
    tree.mkdir(parents=True)
    (tree / "modules.dep").write_bytes(b"a:\n" * ((64 << 20) // 3))

    def run() -> None:
        with pytest.raises(ModuleNotFoundInTreeError):
            find_module("nvidia", "6.1.0-test", tmp_path)

    took = elapsed(run)
    assert took < FAST, f"{took:.1f} s to look a module up in a 64 MiB modules.dep"
