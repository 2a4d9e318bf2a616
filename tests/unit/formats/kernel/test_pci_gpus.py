"""The PCI attribute parser, the GPU rule table (real ids, tests/fixtures/hosts/README.md "GPUs on the PCI bus"
names where each comes from) and the sysfs reader on the fixture hosts."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers.support import FIXTURES, fixture_paths, require_module

from driver_container.formats.gpu_ids import GPU_ROWS
from driver_container.formats.gpu_support import gpu_support
from driver_container.formats.kernel.pci import PciFunction, is_pci_address, nvidia_functions, parse_pci_hex
from driver_container.inspect.pcigpus import read_pci_gpus

HOSTS = FIXTURES / "hosts"


def test_parse_pci_hex_reads_what_sysfs_writes_and_nothing_else() -> None:
    assert parse_pci_hex("0x10de\n", digits=4) == 0x10DE
    assert parse_pci_hex("0x030200\n", digits=6) == 0x030200
    for bad in ("10de\n", "0x\n", "0x10de\n\n", " 0x10de", "0x1_0de", "0x10dex", "0x٣", "0x10de0", ""):
        assert parse_pci_hex(bad, digits=4) is None, bad


def test_parse_pci_hex_round_trips_every_width() -> None:
    hypothesis = require_module("hypothesis")
    strategies = require_module("hypothesis.strategies")

    @hypothesis.given(strategies.integers(0, 0xFFFFFF), strategies.sampled_from([4, 6]))
    def check(value: int, digits: int) -> None:
        text = f"0x{value:0{digits}x}\n"
        assert parse_pci_hex(text, digits=digits) == (value if len(text) - 3 <= digits else None)

    check()


def test_pci_addresses() -> None:
    assert is_pci_address("0000:3b:00.0") and is_pci_address("000f:01:00.0") and is_pci_address("10000:00:01.7")
    for bad in ("0000:3b:00.8", "0000:3B:00.0", "0000:3b:00", "3b:00.0", "0000:3b:0.0", "../../x"):
        assert not is_pci_address(bad), bad


@pytest.mark.parametrize(
    ("device", "generation", "open_", "proprietary"),
    [
        (0x1B38, "Pascal", "no", "yes"),  # Tesla P40
        (0x1DB4, "Volta", "no", "yes"),  # Tesla V100 PCIe 16GB
        (0x27B8, "Ada", "yes", "yes"),  # L4
        (0x2331, "Hopper", "yes", "yes"),  # H100 PCIe
        (0x2342, "Hopper", "yes", "no"),  # GH200: kernelopen without gsp_proprietary_supported
        (0x2901, "Blackwell", "yes", "no"),  # B200
        (0x2B85, "Blackwell", "yes", "no"),  # GeForce RTX 5090
        (0x2E12, "Blackwell", "yes", "no"),  # GB10 (DGX Spark)
        (0x1EB8, "Turing", "yes", "unknown"),  # T4: in the open README, not in that supported-gpus.json
    ],
)
def test_rules_of_real_ids(device: int, generation: str, open_: str, proprietary: str) -> None:
    support = gpu_support(device)
    assert support is not None
    assert (support.generation, support.open, support.proprietary) == (generation, open_, proprietary)


def test_unknown_ids_and_non_gpus_have_no_rule() -> None:
    # A GB10 PCIe root port, an H100 NVSwitch, an id no list names: no rule, so never a finding.
    assert gpu_support(0x22CE) is None and gpu_support(0x22A3) is None and gpu_support(0xFFFF) is None


def test_blackwell_needs_the_570_branch() -> None:
    b200 = gpu_support(0x2901)
    assert b200 is not None
    assert b200.branch_too_old("535.247.01") and b200.branch_too_old("550.127.08")
    assert not any(b200.branch_too_old(v) for v in ("570.172.08", "580.178.04", "595.91.07", None, "x.y"))
    h100 = gpu_support(0x2331)
    assert h100 is not None and not h100.branch_too_old("535.247.01")


def test_generated_rows_name_each_id_once() -> None:
    ids = [text for *_, row in GPU_ROWS for text in row.split()]
    assert len(ids) == len(set(ids)) and all(len(t) == 4 and int(t, 16) >= 0 for t in ids)
    assert {(o, p) for _, o, p, _ in GPU_ROWS} <= {(a, b) for a in ("yes", "no") for b in ("yes", "no", "unknown")}


def test_reader_lists_only_nvidia_gpus_with_their_driver() -> None:
    found = read_pci_gpus(fixture_paths(HOSTS / "talos-1.13-l4-v100-open"))
    assert found.problems == ()
    assert found.gpus == (
        PciFunction("0000:01:00.0", 0x10DE, 0x27B8, 0x030200, "nvidia"),  # the host bridge 0000:00:00.0 is not
        PciFunction("0000:81:00.0", 0x10DE, 0x1DB4, 0x030200, None),
    )


def test_reader_on_a_host_without_a_pci_tree() -> None:
    assert read_pci_gpus(fixture_paths(HOSTS / "talos-1.13-open-595")) == ((), ())


def _function(sys: Path, address: str, vendor: str, device: str, pci_class: str) -> Path:
    real = sys / "devices/pci000f:00/000f:00:00.0" / address
    real.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("device", device), ("class", pci_class)):
        (real / name).write_text(value + "\n")
    link = sys / "bus/pci/devices" / address
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(real, link.parent))
    return real


def test_reader_skips_bridges_virtual_functions_and_reports_garbage(tmp_path: Path) -> None:
    tree = tmp_path / "host"
    shutil.copytree(HOSTS / "talos-1.13-open-595", tree, symlinks=True)
    sys = tree / "sys"
    _function(sys, "000f:00:00.0", "0x10de", "0x22ce", "0x060400")  # GB10 PCIe root port
    _function(sys, "000f:01:00.0", "0x10de", "0x2e12", "0x030000")  # GB10
    vf = _function(sys, "000f:01:00.4", "0x10de", "0x2e12", "0x030200")
    (vf / "physfn").symlink_to("../000f:01:00.0")
    _function(sys, "000f:02:00.0", "0x10de", "garbage", "0x030200")
    found = read_pci_gpus(fixture_paths(tree))
    assert found.gpus == (PciFunction("000f:01:00.0", 0x10DE, 0x2E12, 0x030000, None),)
    assert len(found.problems) == 1 and "000f:02:00.0/device: not a PCI id" in str(found.problems[0])


def test_proc_bus_pci_devices_names_the_nvidia_functions() -> None:
    text = (HOSTS / "talos-1.13-l4-v100-open/proc/bus/pci/devices").read_text()
    assert nvidia_functions(text) == {"01:00.0", "81:00.0"}  # not the host bridge 00:00.0
    assert nvidia_functions("0008\t10de2e12\t5\n") == {"00:01.0"}  # devfn 0x08: slot 1, function 0
    assert nvidia_functions("") == frozenset()
    for bad in ("01:00.0\t10de27b8\n", "0100 10de27b8\n", "0100\t10dex7b8\n", "zz00\t10de27b8\n"):
        assert nvidia_functions(bad) is None, bad


def test_only_the_functions_proc_names_nvidia_are_read(tmp_path: Path) -> None:
    tree = tmp_path / "host"
    shutil.copytree(HOSTS / "talos-1.13-l4-v100-open", tree, symlinks=True)
    listed = tree / "proc/bus/pci/devices"
    text = listed.read_text()
    listed.write_text(text.replace("\t10de1db4\t", "\t80862020\t"))  # the V100 as /proc would not show it
    assert [g.address for g in read_pci_gpus(fixture_paths(tree)).gpus] == ["0000:01:00.0"]
    listed.write_text("not the kernel's format\n")  # then every function is read
    assert [g.address for g in read_pci_gpus(fixture_paths(tree)).gpus] == ["0000:01:00.0", "0000:81:00.0"]
    listed.unlink()
    assert [g.address for g in read_pci_gpus(fixture_paths(tree)).gpus] == ["0000:01:00.0", "0000:81:00.0"]
