"""What a forked child sends back (runtime/childresult.py): plain values by marshal, everything else by
pickle, each read back as the same value and type; anything else is no result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from driver_container.base.errors import PublishError
from driver_container.runtime.childresult import decode_result, encode_result
from driver_container.runtime.supervise import run_in_child


class Point(NamedTuple):
    x: int


@pytest.mark.parametrize("value", ["535.309.01", 3, None, ("a", 1), Point(1), Path("/run/nvidia"), b"\0x"])
def test_every_result_reads_back_with_its_type(value: object) -> None:
    kind, back = decode_result(encode_result(("ok", value)))
    assert kind == "ok" and back == value and type(back) is type(value)


def test_an_error_keeps_its_class_and_fields() -> None:
    kind, back = decode_result(encode_result(("error", PublishError("x: bad", path="x"))))
    assert kind == "error" and isinstance(back, PublishError) and back.path == "x"


def test_a_str_result_goes_without_pickle() -> None:
    assert encode_result(("ok", "535.309.01")).startswith(b"M")
    script = (
        "import sys\nfrom driver_container.runtime.childresult import decode_result, encode_result\n"
        "assert decode_result(encode_result(('ok', '1.2'))) == ('ok', '1.2')\nprint('pickle' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"


@pytest.mark.parametrize("data", [b"", b"M", b"Mgarbage", b"P\x80", b"Xanything", encode_result(("ok", 1))[:-1]])
def test_truncated_or_foreign_bytes_are_no_result(data: bytes) -> None:
    assert decode_result(data) == ("died", None)


def test_a_child_returns_a_version_and_raises_an_error() -> None:
    assert run_in_child(lambda: "535.309.01") == "535.309.01"

    def fail() -> str:
        raise PublishError("DRIVER_ROOT: read-only", path="/run/nvidia/driver")

    with pytest.raises(PublishError) as raised:
        run_in_child(fail)
    assert raised.value.path == "/run/nvidia/driver"
