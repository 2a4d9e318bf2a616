"""kmod's printing rules on hand-made values (the fixtures and the real tree cover the common cases)."""

from __future__ import annotations

import pytest

from driver_container.formats.kmod import ModuleInfo, Signature, format_modinfo
from driver_container.formats.kmod.format import hex_folded, to_json


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"", ""),
        (b"\x01", "01"),
        (bytes(range(20)), ":".join(f"{i:02X}" for i in range(20))),
        (bytes(range(21)), ":".join(f"{i:02X}" for i in range(20)) + ":\n\t\t14"),
        (
            bytes(range(40)),
            ":".join(f"{i:02X}" for i in range(20)) + ":\n\t\t" + ":".join(f"{i:02X}" for i in range(20, 40)),
        ),
    ],
)
def test_hex_folding(raw: bytes, text: str) -> None:
    assert hex_folded(raw) == text


def _info(*fields: tuple[str, str], signature: Signature | None = None) -> ModuleInfo:
    return ModuleInfo(filename="/m/x.ko", name="x", fields=fields, signature=signature)


def test_padding_parm_merge_and_order() -> None:
    info = _info(
        ("parm", "b:first b"),
        ("parmtype", "a:int"),
        ("description", "d"),
        ("parm", "b:second b"),
        ("parmtype", "c:bool"),
        ("parm", "c:the c"),
        ("a_very_long_key_name", "v"),
        ("parm", "bad-no-colon"),
    )
    assert format_modinfo(info) == (
        b"filename:       /m/x.ko\ndescription:    d\na_very_long_key_name:     v\n"
        b"parm:           c:the c (bool)\nparm:           a:int\nparm:           b:second b\n"
    )
    assert format_modinfo(info, field="parm") == b"c:the c (bool)\na: (int)\nb:second b\n"
    assert format_modinfo(info, null=True) == (
        b"filename:       /m/x.ko\0description=d\0a_very_long_key_name=v\0"
        b"parm:           c:the c (bool)\0parm:           a:int\0parm:           b:second b\0"
    )


def test_signature_lines_and_non_utf8_values() -> None:
    sig = Signature("PKCS#7", "Key", b"\xab\xcd", "sha512", bytes(21), algo=0, hash=0, id_type=2)
    info = _info(("description", b"caf\xe9".decode("utf-8", "surrogateescape")), signature=sig)
    out = format_modinfo(info)
    assert out == (
        b"filename:       /m/x.ko\ndescription:    caf\xe9\nsig_id:         PKCS#7\nsigner:         Key\n"
        b"sig_key:        AB:CD\nsig_hashalgo:   sha512\nsignature:      " + b":".join([b"00"] * 20) + b":\n\t\t00\n"
    )
    assert format_modinfo(info, field="signer", null=True) == b"Key\0"
    assert format_modinfo(info, field="filename") == b"/m/x.ko\n"
    assert to_json(info)["signature"]["sig_key"] == "AB:CD"
