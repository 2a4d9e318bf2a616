"""Appended signatures: PKCS#7 with each digest kmod names, the older raw trailer forms, bad DER."""

from __future__ import annotations

import glob
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from helpers.support import MODULES, require
from test_bad_inputs import ELF_PART

from driver_container.base.errors import ModuleFormatError
from driver_container.formats.kmod import format_modinfo
from driver_container.formats.kmod.der import DerError, oid_text
from driver_container.formats.kmod.signature import MAGIC, split_signature
from driver_container.readers.kmod import read_module


def _sign_file() -> str:
    found = sorted(glob.glob("/usr/src/linux-headers-*/scripts/sign-file")) + sorted(
        glob.glob("/usr/lib/linux-kbuild-*/scripts/sign-file")
    )
    require(
        found and shutil.which("openssl"), "kbuild sign-file and openssl", how="apt-get install linux-headers-amd64"
    )
    return found[-1]


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("key")
    # Two name attributes before the CN and a serial with its top bit set (DER adds a 0x00 pad).
    subprocess.run(
        [
            "openssl",
            "req",
            "-new",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-set_serial",
            "0x80aabbccddeeff00112233",
            "-subj",
            "/O=Test Org/OU=unit/CN=Unit test key",
            "-keyout",
            str(base / "k.pem"),
            "-out",
            str(base / "c.pem"),
        ],
        check=True,
        capture_output=True,
    )
    return base / "k.pem", base / "c.pem"


@pytest.mark.parametrize("digest", ["sha1", "sha224", "sha256", "sha384", "sha512"])
def test_pkcs7_digests_match_kmod(kmod_modinfo, signing_key, tmp_path: Path, digest: str) -> None:  # type: ignore[no-untyped-def]
    module = tmp_path / "m.ko"
    module.write_bytes(ELF_PART)
    subprocess.run([_sign_file(), digest, *map(str, signing_key), str(module)], check=True)
    info = read_module(module)
    assert info.signature is not None
    assert (info.signature.signer, info.signature.sig_hashalgo) == ("Unit test key", digest)
    assert info.signature.sig_key == bytes.fromhex("80aabbccddeeff00112233")
    assert format_modinfo(info) == kmod_modinfo(module)


def _raw_trailer(signer: bytes, key_id: bytes, sig: bytes, algo: int, hash_: int, id_type: int) -> bytes:
    head = struct.pack(">BBBBB3xI", algo, hash_, id_type, len(signer), len(key_id), len(sig))
    return signer + key_id + sig + head + MAGIC


@pytest.mark.parametrize("id_type", [0, 1])
def test_pre_pkcs7_trailers_match_kmod(kmod_modinfo, tmp_path: Path, id_type: int) -> None:  # type: ignore[no-untyped-def]
    # Kernels before 4.3 wrote the signer and key id in the trailer itself (X.509 id_type 1; PGP 0).
    module = tmp_path / "old.ko"
    module.write_bytes(ELF_PART + _raw_trailer(b"Old signer", bytes(range(22)), b"\xaa" * 41, 1, 4, id_type))
    info = read_module(module)
    assert info.signature is not None
    assert (info.signature.sig_id, info.signature.sig_hashalgo) == (("PGP", "X509")[id_type], "sha256")
    assert format_modinfo(info) == kmod_modinfo(module)


def test_invalid_trailer_values() -> None:
    with pytest.raises(ModuleFormatError, match=r"invalid signature trailer \(algo 9, hash 4, id_type 2\)"):
        split_signature(ELF_PART + _raw_trailer(b"", b"", b"x", 9, 4, 2), "m.ko")
    with pytest.raises(ModuleFormatError, match="too short for its trailer"):
        split_signature(MAGIC, "m.ko")
    assert split_signature(ELF_PART, "m.ko") == (len(ELF_PART), None)


@pytest.mark.parametrize("der", [b"", b"\x30", b"\x30\x05\x06\x03", b"\x30\x03\x02\x01\x00", b"\x04\x01x"])
def test_unreadable_pkcs7(der: bytes) -> None:
    with pytest.raises(ModuleFormatError, match=r"m\.ko: unreadable PKCS#7 module signature"):
        split_signature(ELF_PART + _raw_trailer(b"", b"", der + b"\0", 0, 0, 2), "m.ko")


def test_oid_text() -> None:
    assert oid_text(bytes.fromhex("608648016503040203")) == "2.16.840.1.101.3.4.2.3"
    assert oid_text(bytes.fromhex("550403")) == "2.5.4.3"
    with pytest.raises(DerError):
        oid_text(b"\x86")


def test_fixture_signature_is_parsed_from_the_decompressed_bytes() -> None:
    plain = read_module(MODULES / "nvidia.ko").signature
    assert plain == read_module(MODULES / "nvidia.ko.zst").signature == read_module(MODULES / "nvidia.ko.xz").signature


@pytest.mark.parametrize("oid", ["2.5.4.3", "1.2.840.113549.1.7.2", "2.16.840.1.101.3.4.2.10", "1.3.14.3.2.26"])
def test_encode_oid_round_trips(oid: str) -> None:
    from driver_container.formats.kmod.der import encode_oid

    assert oid_text(encode_oid(oid)) == oid


def _der(tag: int, *parts: bytes) -> bytes:
    body = b"".join(parts)
    assert len(body) < 128
    return bytes([tag, len(body)]) + body


def _pkcs7_with(digest_oid: bytes, issuer: bytes = b"") -> bytes:
    signer_info = _der(
        0x30,
        b"\x02\x01\x01",
        _der(0x30, _der(0x30, issuer), b"\x02\x01\x05"),
        _der(0x30, _der(0x06, digest_oid)),
        _der(0x30),
        _der(0x04, b"sig"),
    )
    signed_data = _der(0x30, b"\x02\x01\x01", _der(0x31), _der(0x30), _der(0x31, signer_info))
    return _der(0x30, _der(0x06, bytes.fromhex("2a864886f70d010702")), _der(0xA0, signed_data))


def test_minimal_pkcs7_and_a_truncated_digest_oid() -> None:
    # Regression (found by bench/fuzz.py): a malformed digest OID escaped as DerError.
    trailer = _raw_trailer(b"", b"", _pkcs7_with(bytes.fromhex("608648016503040203")), 0, 0, 2)
    _, sig = split_signature(ELF_PART + trailer, "m.ko")
    assert sig is not None
    assert (sig.signer, sig.sig_key, sig.sig_hashalgo, sig.signature) == ("", b"\x05", "sha512", b"sig")
    with pytest.raises(ModuleFormatError, match="truncated OBJECT IDENTIFIER"):
        split_signature(ELF_PART + _raw_trailer(b"", b"", _pkcs7_with(b"\x86"), 0, 0, 2), "m.ko")


def test_signer_without_common_name_is_the_last_attribute() -> None:
    # kmod's x509_name_to_str (OpenSSL): no CN -> the data of the last attribute it looked at.
    org = _der(0x31, _der(0x30, _der(0x06, b"\x55\x04\x0a"), _der(0x0C, b"Org")))
    unit = _der(0x31, _der(0x30, _der(0x06, b"\x55\x04\x0b"), _der(0x0C, b"Unit")))
    der = _pkcs7_with(bytes.fromhex("608648016503040201"), org + unit)
    _, sig = split_signature(ELF_PART + _raw_trailer(b"", b"", der, 0, 0, 2), "m.ko")
    assert sig is not None
    assert (sig.signer, sig.sig_hashalgo) == ("Unit", "sha256")


def _xz_claiming_dict(data: bytes, props: int) -> bytes:
    """An xz stream whose LZMA2 filter claims dictionary-size code ``props`` (xz file format 1.0.4,
    3.1.1 Block Header and 5.3.1 LZMA2 properties), with the block header CRC32 redone. Compressing with a
    real 1 GiB dictionary would make this test allocate about 1 GB, and a process's peak RSS is passed on
    to every child it starts (getrusage(2): preserved across execve), e.g. the fuzzer's rss limit."""
    import lzma
    import zlib

    packed = bytearray(lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32))
    start = 12  # after the stream header
    size = (packed[start] + 1) * 4
    header = packed[start : start + size - 4]
    at = header.index(bytes([0x21, 0x01]))  # filter id LZMA2, 1 byte of properties
    header[at + 2] = props
    packed[start : start + size] = header + zlib.crc32(header).to_bytes(4, "little")
    return bytes(packed)


def test_xz_asking_for_a_huge_dictionary_is_refused() -> None:
    data = _xz_claiming_dict(b"x" * 100, 36)  # code 36: 1.5 GiB, above the decoder's 256 MiB memlimit
    with pytest.raises(ModuleFormatError, match=r"m\.ko: corrupt xz stream: Memory usage limit"):
        read_module(data, filename="m.ko")
