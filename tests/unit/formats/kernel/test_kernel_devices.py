from __future__ import annotations

from helpers.support import NODE_FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from driver_container.formats.kernel.devices import (
    CapabilityFile,
    CharDevices,
    MigMinor,
    capability_proc_path,
    parse_capability_file,
    parse_mig_minors,
    parse_proc_devices,
)


def test_char_section_only_and_shared_major() -> None:
    devices = parse_proc_devices((NODE_FIXTURES / "h100x2-mig/proc/devices").read_text())
    assert devices.major("nvidia") == 195
    assert devices.major("nvidiactl") == 195
    assert devices.major("nvidia-uvm") == 237
    assert devices.major("nvidia-caps") == 236
    assert devices.major("loop") is None  # a block device
    assert devices.names_starting("nvidia-caps") == ("nvidia-caps-imex-channels", "nvidia-caps")


def test_frontend_name_of_old_drivers() -> None:
    devices = parse_proc_devices((NODE_FIXTURES / "frontend-535/proc/devices").read_text())
    assert devices.major("nvidia") is None
    assert devices.major("nvidia-frontend") == 195


def test_odd_lines_skipped() -> None:
    text = "Character devices:\n195 nvidia\nx nvidia-uvm\n999999 huge\n 12 two words\n\nBlock devices:\n 8 sd\n"
    assert parse_proc_devices(text) == CharDevices((("nvidia", 195),))


def test_mig_minors() -> None:
    entries = parse_mig_minors((NODE_FIXTURES / "h100x2-mig/proc/driver/nvidia-caps/mig-minors").read_text())
    assert entries[0] == MigMinor("config", 1)
    assert MigMinor("gpu0/gi1/ci0/access", 13) in entries
    assert parse_mig_minors("gpu0/gi0/access x\nonly\n\nconfig 1 extra\n") == ()


def test_capability_files() -> None:
    caps = NODE_FIXTURES / "h100x2-mig/proc/driver/nvidia/capabilities"
    assert parse_capability_file((caps / "mig/config").read_text()) == CapabilityFile(1, 0o400)
    assert parse_capability_file((caps / "gpu0/mig/gi1/ci0/access").read_text()) == CapabilityFile(13, 0o444)
    assert parse_capability_file("DeviceFileMinor: 1\nDeviceFileModify: 1\n") is None
    assert parse_capability_file("DeviceFileMinor: 1\nDeviceFileMode: 4096\n") is None  # beyond permission bits
    assert parse_capability_file("DeviceFileMinor: x\nDeviceFileMode: 256\n") is None


def test_capability_proc_paths_put_mig_after_the_gpu() -> None:
    assert capability_proc_path("config") == "mig/config"
    assert capability_proc_path("monitor") == "mig/monitor"
    assert capability_proc_path("gpu0/gi1/access") == "gpu0/mig/gi1/access"
    assert capability_proc_path("gpu31/gi14/ci7/access") == "gpu31/mig/gi14/ci7/access"


@given(st.text(max_size=400))
def test_parsers_never_raise(text: str) -> None:
    parse_proc_devices(text)
    parse_mig_minors(text)
    parse_capability_file(text)
