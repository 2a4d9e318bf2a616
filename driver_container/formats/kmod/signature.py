"""The signature appended to a module file, and the few PKCS#7 fields kmod shows.

Layout (kernel scripts/sign-file.c, include/linux/module_signature.h), at the end of the
decompressed bytes: ``[module][signer][key id][signature][struct module_signature][MAGIC]`` where
``struct module_signature`` is ``u8 algo, hash, id_type, signer_len, key_id_len; u8 pad[3]; __be32
sig_len`` - big endian on every architecture. Modern kernels write id_type 2 (PKCS#7) with signer_len
and key_id_len 0; the signature is then a DER PKCS#7 SignedData (RFC 2315) and kmod, through OpenSSL,
shows the first SignerInfo's issuer commonName, serial number, digest algorithm and encrypted digest.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from driver_container.base.errors import DerError, ModuleFormatError
from driver_container.formats.kmod.der import Element, contents, element, encode_oid, inside, oid_text
from driver_container.formats.kmod.model import Signature

if TYPE_CHECKING:
    from driver_container.formats.kmod.compression import Buffer

MAGIC = b"~Module signature appended~\n"
_TRAILER = struct.Struct(">BBBBB3xI")
ID_TYPES = ("PGP", "X509", "PKCS#7")  # enum pkey_id_type (kmod libkmod-signature.c)
ALGOS = ("DSA", "RSA")  # enum pkey_algo
# enum pkey_hash_algo, in kmod's order (the trailer's hash byte indexes it for non-PKCS#7 signatures)
HASHES = ("md4", "md5", "sha1", "rmd160", "sha256", "sha384", "sha512", "sha224", "sm3")
_HASH_OIDS = {
    "1.2.840.113549.2.4": "md4",
    "1.2.840.113549.2.5": "md5",
    "1.3.14.3.2.26": "sha1",
    "1.3.36.3.2.1": "rmd160",
    "2.16.840.1.101.3.4.2.1": "sha256",
    "2.16.840.1.101.3.4.2.2": "sha384",
    "2.16.840.1.101.3.4.2.3": "sha512",
    "2.16.840.1.101.3.4.2.4": "sha224",
    "1.2.156.10197.1.401": "sm3",
    # Linux >= 6.7 can sign with SHA-3 (kernel/module/Kconfig MODULE_SIG_SHA3_*); kmod 30 predates it.
    "2.16.840.1.101.3.4.2.8": "sha3-256",
    "2.16.840.1.101.3.4.2.9": "sha3-384",
    "2.16.840.1.101.3.4.2.10": "sha3-512",
}
# Compared as raw DER contents: decoding every OID to text costs more than the rest of the walk.
_RAW_HASH_OIDS = {encode_oid(oid): name for oid, name in _HASH_OIDS.items()}
_OID_SIGNED_DATA = encode_oid("1.2.840.113549.1.7.2")
_OID_COMMON_NAME = encode_oid("2.5.4.3")


def split_signature(data: Buffer, label: str) -> tuple[int, Signature | None]:
    """Return (length of the module without the signature, signature or None when unsigned).

    A length, not a slice: copying a 100 MB module only to drop its last kilobyte is measurable.
    """
    if len(data) < len(MAGIC) or data[-len(MAGIC) :] != MAGIC:
        return len(data), None
    end = len(data) - len(MAGIC) - _TRAILER.size
    if end < 0:
        raise ModuleFormatError(
            f"{label}: signature marker present but the file is too short for its trailer", path=label
        )
    algo, hash_, id_type, signer_len, key_id_len, sig_len = _TRAILER.unpack_from(data, end)
    if algo >= len(ALGOS) or hash_ >= len(HASHES) or id_type >= len(ID_TYPES):
        raise ModuleFormatError(
            f"{label}: invalid signature trailer (algo {algo}, hash {hash_}, id_type {id_type})", path=label
        )
    payload = sig_len + signer_len + key_id_len
    if sig_len == 0 or payload > end:
        raise ModuleFormatError(
            f"{label}: signature trailer says {sig_len} + {signer_len} + {key_id_len} bytes but only {end} "
            "bytes precede it: truncated or corrupt signature",
            path=label,
        )
    sig = data[end - sig_len : end]
    key_id = data[end - sig_len - key_id_len : end - sig_len]
    signer = data[end - payload : end - sig_len - key_id_len]
    if id_type == 2:
        signature = _pkcs7(sig, label, algo, hash_)
    else:
        signature = Signature(
            sig_id=ID_TYPES[id_type],
            signer=_c_text(signer),
            sig_key=key_id,
            sig_hashalgo=HASHES[hash_],
            signature=sig,
            algo=algo,
            hash=hash_,
            id_type=id_type,
        )
    return end - payload, signature


def _c_text(raw: bytes) -> str:
    # kmod prints these with "%s": the text stops at the first NUL.
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _integer_magnitude(raw: bytes) -> bytes:
    # OpenSSL's ASN1_INTEGER keeps the magnitude: DER's sign-padding 0x00 is dropped, and a
    # negative serial (seen in old certificates) is stored as its absolute value.
    if raw and raw[0] & 0x80:
        value = -int.from_bytes(raw, "big", signed=True)
        return value.to_bytes((value.bit_length() + 7) // 8, "big")
    stripped = raw.lstrip(b"\0")
    return stripped or raw[-1:]


def _common_name(der: bytes, issuer: Element) -> str:
    """First commonName of the issuer; kmod falls back to the last attribute when there is none."""
    last: bytes | None = None
    for rdn in inside(der, issuer):
        for attribute in inside(der, rdn):
            oid, value = inside(der, attribute)[:2]
            last = contents(der, value)
            if contents(der, oid) == _OID_COMMON_NAME:
                return _c_text(last)
    return "" if last is None else _c_text(last)


def _oid(der: bytes, item: Element) -> bytes:
    if item[0] != 0x06:
        raise DerError(f"expected an OBJECT IDENTIFIER, found tag 0x{item[0]:02x}", offset=item[1])
    return contents(der, item)


def _pkcs7(der: bytes, label: str, algo: int, hash_: int) -> Signature:
    # Walked as offsets into ``der`` (der.py); every element is checked to lie within its parent.
    try:
        oid, explicit = inside(der, element(der))[:2]
        content_type = _oid(der, oid)
        if content_type != _OID_SIGNED_DATA:
            raise DerError(f"content type {oid_text(content_type)} is not signedData")
        signed_data = inside(der, explicit)[0]
        signer_infos = inside(der, signed_data)[-1]
        signer_info = inside(der, signer_infos)[0]
        parts = inside(der, signer_info)
        issuer_and_serial, digest_algorithm = parts[1], parts[2]
        if issuer_and_serial[0] != 0x30:
            raise DerError("SignerInfo identifies its key by subjectKeyIdentifier, not issuer and serial")
        issuer, serial = inside(der, issuer_and_serial)[:2]
        digest_oid = _oid(der, inside(der, digest_algorithm)[0])
        hash_name = _RAW_HASH_OIDS.get(digest_oid) or oid_text(digest_oid)
        encrypted = next(p for p in parts[3:] if p[0] == 0x04)
        signer = _common_name(der, issuer)
    except (DerError, IndexError, ValueError, StopIteration) as exc:
        raise ModuleFormatError(
            f"{label}: unreadable PKCS#7 module signature: {exc or 'missing field'}", path=label
        ) from exc
    return Signature(
        sig_id=ID_TYPES[2],
        signer=signer,
        sig_key=_integer_magnitude(contents(der, serial)),
        sig_hashalgo=hash_name,
        signature=contents(der, encrypted),
        algo=algo,
        hash=hash_,
        id_type=2,
    )
