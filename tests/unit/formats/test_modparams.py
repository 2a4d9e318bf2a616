"""formats.modconf: the /drivers/<module>.conf parser and NVIDIA's R580+ parameter rule (pure)."""

from __future__ import annotations

import pytest
from helpers.support import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from driver_container.base.errors import HostReadError, UsageError
from driver_container.formats.modconf import (
    conf_file_name,
    driver_major,
    has_parameter,
    nvidia_parameters,
    parse_module_conf,
)


def test_fixture_conf_order_quotes_and_comments() -> None:
    text = (FIXTURES / "generic/ubuntu-unloaded/drivers/nvidia.conf").read_text()
    assert parse_module_conf(text) == [
        ("NVreg_EnableGpuFirmware", "1"),
        ("NVreg_OpenRmEnableUnsupportedGpus", "1"),
        ("NVreg_RegistryDwords", "RMUseSwI2c=0x01;RMI2cSpeed=100"),
    ]
    assert parse_module_conf((FIXTURES / "generic/ubuntu-unloaded/drivers/nvidia-peermem.conf").read_text()) == []


def test_duplicates_kept_in_order_and_trailing_comment() -> None:
    assert parse_module_conf("a=1 b=2 # c=3\n\n  a=4\n") == [("a", "1"), ("b", "2"), ("a", "4")]


@pytest.mark.parametrize("text", ["justaname\n", "=1\n", 'x="unterminated\n'])
def test_malformed_lines_name_source_and_line(text: str) -> None:
    with pytest.raises(HostReadError, match=r"^/drivers/nvidia\.conf:1: "):
        parse_module_conf(text, source="/drivers/nvidia.conf")


def test_names_and_versions() -> None:
    assert conf_file_name("nvidia_uvm") == conf_file_name("nvidia-uvm") == "nvidia-uvm.conf"
    assert has_parameter([("NVreg-CoherentGPUMemoryMode", "x")], "NVreg_CoherentGPUMemoryMode")
    assert driver_major("580.65") == 580 and driver_major(" 595.91.07\n") == 595
    for bad in ("", "580", "580.x.1", "1.2.3.4", "v580.1"):
        with pytest.raises(UsageError):
            driver_major(bad)


def test_coherent_mode_rule_boundaries() -> None:
    assert nvidia_parameters([], "579.99.99") == []
    assert nvidia_parameters([], "580.0") == [("NVreg_CoherentGPUMemoryMode", "driver")]
    assert nvidia_parameters([("NVreg_CoherentGPUMemoryMode", "cdmm")], "595.91.07") == [
        ("NVreg_CoherentGPUMemoryMode", "cdmm")
    ]


_word = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
_value = st.from_regex(r"[A-Za-z0-9_.;:,x-]{0,16}", fullmatch=True)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_word, _value), max_size=8), st.integers(min_value=1, max_value=3))
def test_round_trip_of_written_pairs(pairs: list[tuple[str, str]], per_line: int) -> None:
    lines = [" ".join(f"{n}={v}" for n, v in pairs[i : i + per_line]) for i in range(0, len(pairs), per_line)]
    assert parse_module_conf("# header\n" + "\n".join(lines) + "\n") == pairs


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_any_text_parses_or_raises_host_read_error(text: str) -> None:
    try:
        result = parse_module_conf(text)
    except HostReadError:
        return
    assert all(isinstance(n, str) and isinstance(v, str) for n, v in result)
