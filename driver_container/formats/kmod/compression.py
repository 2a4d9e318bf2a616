"""Module file compression: detection by magic bytes and decompression under a size cap.

kmod (libkmod-file.c) also decides by magic, not by file name, and decompresses the whole file before
reading ELF and the signature; so do we. The cap stops decompression bombs: output is produced in
bounded steps and abandoned as soon as it passes ``max_size``.
"""

from __future__ import annotations

import lzma
import zlib
from typing import TYPE_CHECKING, Any

from driver_container.base.errors import ModuleFormatError

XZ_MAGIC = b"\xfd7zXZ\x00"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 4 << 20
# A hostile xz header may ask for a 1.5 GiB dictionary; modules use 1 MiB (scripts/Makefile.modinst
# passes --lzma2=dict=1MiB) and xz -9 uses 64 MiB, so anything above 256 MiB is refused.
_XZ_MEMLIMIT = 256 << 20
# Concatenated xz streams / gzip members in one file: a module has one (the kernel's modules_install and
# kmod's tests write one); the formats allow more. Each stream restarts the decoder on a copy of the rest
# of the file, so the count is capped to keep the work linear: at most 16 passes over the file, where
# 160000 empty 32-byte streams (a 5 MB file) took ~30 s.
MAX_STREAMS = 16

# File contents: bytes, or a read-only map of a large file (only slicing, indexing, len and the
# buffer protocol are used on it, so both behave the same).
if TYPE_CHECKING:
    import mmap
    from typing import TypeAlias

    Buffer: TypeAlias = bytes | mmap.mmap  # readers/kmod.py maps large module files


def detect_compression(data: Buffer) -> str | None:
    """The compression ("xz", "zstd", "gzip") from the first bytes; None for a plain file."""
    head = data[:6]
    if head == XZ_MAGIC:
        return "xz"
    if head[:4] == ZSTD_MAGIC:
        return "zstd"
    if head[:2] == GZIP_MAGIC:
        return "gzip"
    return None


def _too_big(label: str, kind: str, max_size: int) -> ModuleFormatError:
    return ModuleFormatError(
        f"{label}: {kind} data decompresses to more than {max_size} bytes (size cap)",
        path=label,
        fix="a real module is far smaller; raise max_size only for a file you trust",
    )


def _too_many(label: str, what: str) -> ModuleFormatError:
    return ModuleFormatError(f"{label}: over {MAX_STREAMS} concatenated {what}: a module file has one", path=label)


def _xz(data: Buffer, label: str, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    rest = data
    # xz files may hold several concatenated streams with NUL padding (xz file format 1.0.4, 2.2).
    for streams in range(MAX_STREAMS + 1):
        if not rest:
            break
        if streams == MAX_STREAMS:
            raise _too_many(label, "xz streams")
        dec = lzma.LZMADecompressor(format=lzma.FORMAT_XZ, memlimit=_XZ_MEMLIMIT)
        try:
            chunk = dec.decompress(rest, max_length=max_size + 1 - total)
            out.append(chunk)
            total += len(chunk)
            while total <= max_size and not dec.eof and not dec.needs_input:
                chunk = dec.decompress(b"", max_length=max_size + 1 - total)
                out.append(chunk)
                total += len(chunk)
        except lzma.LZMAError as exc:
            raise ModuleFormatError(f"{label}: corrupt xz stream: {exc}", path=label) from exc
        if total > max_size:
            raise _too_big(label, "xz", max_size)
        if not dec.eof:
            raise ModuleFormatError(f"{label}: truncated xz stream (ends before the end-of-stream marker)", path=label)
        rest = dec.unused_data.lstrip(b"\x00")
    return b"".join(out)


def check_zstd_frames(data: Buffer, label: str) -> int:
    """Walk the frames and blocks (RFC 8878, 3.1) so a truncated stream is an error; count the frames.

    zstandard's stream reader stops silently at the end of its input, even inside a frame; the walk
    reads only headers (a 100 MB module has ~800 blocks), the decoder still checks the contents.
    """
    truncated = ModuleFormatError(f"{label}: truncated zstd stream (ends inside a frame)", path=label)
    pos, size, frames = 0, len(data), 0
    while pos < size:
        if pos + 5 > size:
            raise truncated
        magic = int.from_bytes(data[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame: magic, 4-byte size, payload
            pos += 8 + int.from_bytes(data[pos + 4 : pos + 8], "little")
            if pos > size:
                raise truncated
            continue
        if magic != 0xFD2FB528:
            raise ModuleFormatError(f"{label}: corrupt zstd stream: no frame magic at offset {pos}", path=label)
        frames += 1
        descriptor = data[pos + 4]
        single_segment = bool(descriptor & 0x20)
        fcs = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
        pos += 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3] + fcs
        last = False
        while not last:
            if pos + 3 > size:
                raise truncated
            header = int.from_bytes(data[pos : pos + 3], "little")
            last, kind, length = bool(header & 1), (header >> 1) & 3, header >> 3
            if kind == 3:
                raise ModuleFormatError(
                    f"{label}: corrupt zstd stream: reserved block type at offset {pos}", path=label
                )
            pos += 3 + (1 if kind == 1 else length)
        pos += 4 if descriptor & 0x04 else 0
        if pos > size:
            raise truncated
    return frames


def _zstd(data: Buffer, label: str, max_size: int) -> bytes:
    import zstandard  # lazy, hot path: only .ko.zst needs it; `status` without module files never loads it

    frames = check_zstd_frames(data, label)
    # The view is released before returning: a map with a live export cannot be closed.
    with memoryview(data) as view:
        try:
            size = zstandard.get_frame_parameters(view[:18]).content_size
            if size not in (zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR) and size > max_size:
                raise _too_big(label, "zstd", max_size)
            if frames == 1 and size not in (zstandard.CONTENTSIZE_UNKNOWN, zstandard.CONTENTSIZE_ERROR):
                # One frame that states its size (what `zstd FILE` writes): one exact allocation.
                result: bytes = zstandard.ZstdDecompressor().decompress(view)
                return result
            return _zstd_stream(zstandard, view, label, max_size)
        except zstandard.ZstdError as exc:
            raise ModuleFormatError(f"{label}: corrupt zstd stream: {exc}", path=label) from exc


def _zstd_stream(zstandard: Any, view: memoryview, label: str, max_size: int) -> bytes:
    # Frames without a content size (zstd writing to a pipe) or several frames: stream, bounded.
    chunks: list[bytes] = []
    total = 0
    with zstandard.ZstdDecompressor().stream_reader(view, read_across_frames=True) as reader:
        while chunk := reader.read(min(_CHUNK, max_size + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_size:
                raise _too_big(label, "zstd", max_size)
    return b"".join(chunks)


def _gzip(data: Buffer, label: str, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    rest = data
    for members in range(MAX_STREAMS + 1):
        if not rest:
            break
        if members == MAX_STREAMS:
            raise _too_many(label, "gzip members")
        dec = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            chunk = dec.decompress(rest, max_size + 1 - total)
            out.append(chunk)
            total += len(chunk)
            while total <= max_size and dec.unconsumed_tail:
                chunk = dec.decompress(dec.unconsumed_tail, max_size + 1 - total)
                out.append(chunk)
                total += len(chunk)
        except zlib.error as exc:
            raise ModuleFormatError(f"{label}: corrupt gzip stream: {exc}", path=label) from exc
        if total > max_size:
            raise _too_big(label, "gzip", max_size)
        if not dec.eof:
            raise ModuleFormatError(f"{label}: truncated gzip stream", path=label)
        rest = dec.unused_data
    return b"".join(out)


def decompress(data: Buffer, kind: str | None, label: str, max_size: int) -> Buffer:
    """Return the module bytes; ``label`` names the file in errors."""
    if kind is None:
        return data
    if kind == "xz":
        result = _xz(data, label, max_size)
    elif kind == "zstd":
        result = _zstd(data, label, max_size)
    else:
        result = _gzip(data, label, max_size)
    if not result:
        raise ModuleFormatError(f"{label}: {kind} stream decompresses to nothing", path=label)
    return result
