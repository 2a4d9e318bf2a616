"""NVIDIA's supported-gpus.json read by formats/supported_gpus.py: the committed list in the real form
(tests/fixtures/supported-gpus/README.md) and every way a document can be wrong."""

from __future__ import annotations

import json

import pytest
from helpers.support import FIXTURES

from driver_container.base.errors import JsonFormatError
from driver_container.formats.supported_gpus import MAX_BYTES, parse_supported_gpus

LIST_595 = (FIXTURES / "supported-gpus/supported-gpus-595.json").read_bytes()


def _parse(data: bytes, *ids: int) -> dict[int, tuple[str, str, int | None]]:
    found = parse_supported_gpus(data, ids, source="list")
    return {device: (s.open, s.proprietary, s.last_branch) for device, s in found.items()}


def test_each_feature_set_and_legacy_branch_of_the_real_form() -> None:
    assert _parse(LIST_595, 0x2331, 0x2342, 0x1DB4, 0x15F8, 0x102D, 0x1EB8) == {
        0x2331: ("yes", "yes", None),  # kernelopen + gsp_proprietary_supported
        0x2342: ("yes", "no", None),  # kernelopen only (GH200)
        0x1DB4: ("no", "yes", 580),  # legacybranch 580.xx; its flavour there is the proprietary one
        0x15F8: ("no", "yes", 580),
        0x102D: ("no", "yes", 470),  # Kepler: only the list knows it
        0x1EB8: ("yes", "yes", None),
    }


def test_only_the_wanted_ids_and_names_and_generations() -> None:
    found = parse_supported_gpus(LIST_595, {0x1DB4, 0x3FFF}, source="/img/supported-gpus.json")
    (v100,) = found.values()
    assert v100.name == "Tesla V100-PCIE-16GB" and v100.generation == "Volta"
    assert v100.label == "Volta, Tesla V100-PCIE-16GB" and v100.source == "/img/supported-gpus.json"
    assert v100.dropped("595.91.07") and not v100.dropped("580.178.04") and not v100.dropped(None)
    assert parse_supported_gpus(LIST_595, {0x102D}, source="x")[0x102D].label == "Tesla K80"


def _doc(*chips: object) -> bytes:
    return json.dumps({"chips": list(chips)}).encode()


def test_the_ids_entry_speaks_for_it_over_a_board_and_this_release_over_a_legacy_one() -> None:
    board = {"devid": "0x1EB8", "subdevid": "0x12A2", "name": "board", "features": []}
    own = {"devid": "0x1EB8", "name": "Tesla T4", "features": ["kernelopen", "gsp_proprietary_supported"]}
    assert _parse(_doc(board, own), 0x1EB8) == {0x1EB8: ("yes", "yes", None)}
    legacy = {"devid": "0x1EB8", "name": "old", "legacybranch": "580.xx", "features": []}
    assert _parse(_doc(legacy, board), 0x1EB8) == {0x1EB8: ("no", "yes", None)}
    assert _parse(_doc(legacy), 0x1EB8) == {0x1EB8: ("no", "yes", 580)}


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b'{"chips": {}}',
        b'{"chips": [1]}',
        _doc({"devid": "1DB4", "features": []}),
        _doc({"devid": "0x1DB45", "features": []}),
        _doc({"devid": 7604, "features": []}),
        _doc({"devid": "0x1DB4", "features": "kernelopen"}),
        _doc({"devid": "0x1DB4", "features": [1]}),
        _doc({"devid": "0x1DB4", "legacybranch": "legacy", "features": []}),
        _doc({"devid": "0x1DB4", "name": 5, "features": []}),
        b'{"chips": ' + b"[" * 100 + b"]" * 100 + b"}",
        b"\xff\xfe",
    ],
)
def test_a_malformed_document_is_one_json_format_error(data: bytes) -> None:
    with pytest.raises(JsonFormatError):
        parse_supported_gpus(data, {0x1DB4}, source="x")


def test_a_document_over_the_limit_is_refused_before_it_is_decoded() -> None:
    with pytest.raises(JsonFormatError, match="larger than"):
        parse_supported_gpus(b" " * (MAX_BYTES + 1), {0x1DB4}, source="x")
