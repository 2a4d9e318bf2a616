"""Every numeric field goes through driver_container.formats.numbers (ASCII digits, bounded).

``"²".isdigit()`` is true and ``int("²")`` raises; ``int("٣")`` is 3; ``int("9" * 5000)`` raises
(Python's int-digits limit). Each parser below crashed or accepted such a value before the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from driver_container.base.errors import DriverContainerError
from driver_container.base.paths import HostPaths
from driver_container.base.problems import Problem
from driver_container.base.resolver import Root
from driver_container.findings import values_equal
from driver_container.formats import numbers
from driver_container.formats.kernel.devices import parse_mig_minors, parse_proc_devices
from driver_container.formats.kernel.modules import parse_proc_modules
from driver_container.formats.kernel.nvidia_proc import gpu_from_information, parse_nvidia_version
from driver_container.formats.kmod.der import DerError, encode_oid
from driver_container.formats.ldcache import libcmp
from driver_container.formats.modconf import driver_major
from driver_container.inspect.sysfs import read_sysfs_module
from driver_container.kube.answers import retry_after as _retry_after
from driver_container.kube.kubeconfig import parse_kubeconfig
from driver_container.node.persistenced import HOST_PID_FILE, host_daemon_pid
from driver_container.runtime.lock import _read_pid
from driver_container.settings import parse_seconds

HOSTILE = ("²", "١٢", "1_000", " 7", "+7", "-7", "0x1f", "", "9" * 5000, "7\u00a0")


@pytest.mark.parametrize("text", HOSTILE)
def test_parse_uint_takes_only_bounded_ascii_digits(text: str) -> None:
    assert numbers.parse_uint(text) is None


def test_parse_uint_bases_and_bounds() -> None:
    assert numbers.parse_uint("0") == 0
    assert numbers.parse_uint("18446744073709551615") == 2**64 - 1
    assert numbers.parse_uint("1" * 21) is None
    assert numbers.parse_uint("ff", base=16) == 255
    assert numbers.parse_uint("8", base=8) is None
    assert numbers.parse_int("-1") == -1
    assert numbers.parse_int("-²") is None
    assert numbers.parse_c_int("0x10") == 16
    assert numbers.parse_c_int("0x") is None
    assert numbers.parse_c_int("-0o17") == -15
    assert numbers.parse_decimal_seconds("1.5") == 1.5
    for bad in ("1e400", "inf", "nan", "-1", "²", "1.", ".5"):
        assert numbers.parse_decimal_seconds(bad) is None, bad


def test_proc_modules_line_with_unicode_digits_is_rejected_not_raised() -> None:
    rejects: list[str] = []
    text = "nvidia 1437696² 82 - Live 0x0 (O)\nnvidia_uvm 2134016 ² - Live 0x0 (O)\nfoo 12 0 - Live 0x0\n"
    assert [m.name for m in parse_proc_modules(text, rejects=rejects)] == ["foo"]
    assert len(rejects) == 2


def test_device_minor_with_unicode_digit_is_unknown() -> None:
    assert gpu_from_information("0000:01:00.0", {"Device Minor": "²"}).device_minor is None
    assert gpu_from_information("0000:01:00.0", {"Device Minor": "١"}).device_minor is None
    assert gpu_from_information("0000:01:00.0", {"Device Minor": "3"}).device_minor == 3


def test_nvrm_version_takes_ascii_digits_only() -> None:
    with pytest.raises(DriverContainerError):
        parse_nvidia_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  ٥٣٥.١٠٤  Wed\n")


def test_proc_devices_and_mig_minors_skip_unicode_digits() -> None:
    assert parse_proc_devices("Character devices:\n²95 nvidia\n195 nvidia-frontend\n").majors == (
        ("nvidia-frontend", 195),
    )
    assert [m.minor for m in parse_mig_minors("gpu0/gi0/access ²\ngpu0/gi1/access 12\n")] == [12]


def test_sysfs_refcnt_with_unicode_digit_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "module/nvidia").mkdir(parents=True)
    (tmp_path / "module/nvidia/refcnt").write_text("١\n")
    module = read_sysfs_module(Root(tmp_path), "nvidia")
    assert module.refcnt is None
    assert module.problems == (Problem(str(tmp_path / "module/nvidia/refcnt"), "not a number: '١'"),)


def test_lock_holder_pid_with_unicode_digit(tmp_path: Path) -> None:
    path = tmp_path / "pid"
    path.write_text("²\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _read_pid(fd) is None
    finally:
        os.close(fd)


def test_host_persistenced_pid_file_with_unicode_digit(tmp_path: Path) -> None:
    pid_file = tmp_path / "host" / HOST_PID_FILE
    pid_file.parent.mkdir(parents=True)
    (tmp_path / "proc/1").mkdir(parents=True)
    (tmp_path / "proc/1/comm").write_text("nvidia-persiste\n")  # comm is cut to 15 bytes (proc(5))
    paths = HostPaths(host_root=tmp_path / "host", procfs_root=tmp_path / "proc")
    pid_file.write_text("²\n")
    assert host_daemon_pid(paths.host, paths.proc) is None
    pid_file.write_text("1\n")
    assert host_daemon_pid(paths.host, paths.proc) == 1


class _Response:
    def __init__(self, value: str) -> None:
        self.headers = {"Retry-After": value}


@pytest.mark.parametrize("value", ["²", "١٢", "9" * 5000, "-1", "1e9"])
def test_retry_after_takes_ascii_delay_seconds_only(value: str) -> None:
    assert _retry_after(_Response(value), 2.0, 30.0) == 2.0  # type: ignore[arg-type]


def test_retry_after_honours_ascii_seconds_up_to_the_cap() -> None:
    assert _retry_after(_Response("7"), 2.0, 30.0) == 7.0  # type: ignore[arg-type]
    assert _retry_after(_Response("700"), 2.0, 30.0) == 30.0  # type: ignore[arg-type]


def test_settings_seconds_refuse_unicode_digits_and_infinity() -> None:
    assert parse_seconds("X", "1.5", 0.0) == 1.5
    for bad in ("²", "١٢", "inf", "nan", "1e400", "-1"):
        with pytest.raises(DriverContainerError):
            parse_seconds("X", bad, 0.0)


def test_parameter_values_compare_ascii_numbers_only() -> None:
    assert values_equal("0x10", "16")
    assert not values_equal("²", "2")
    assert not values_equal("١", "1")


def test_driver_major_refuses_unicode_digits() -> None:
    assert driver_major("580.105.08") == 580
    with pytest.raises(DriverContainerError):
        driver_major("5²0.105.08")


def test_kubeconfig_huge_integer_stays_text() -> None:
    doc = parse_kubeconfig("a: " + "9" * 5000 + "\nb: 12\n")
    assert doc == {"a": "9" * 5000, "b": 12}


def test_ldcache_order_of_huge_digit_runs() -> None:
    assert libcmp("libx.so." + "9" * 5000, "libx.so." + "9" * 4999) > 0
    assert libcmp("libx.so.0" + "1" * 5000, "libx.so." + "1" * 5000) == 0


def test_encode_oid_refuses_non_ascii_arcs() -> None:
    with pytest.raises(DerError):
        encode_oid("1.²")
