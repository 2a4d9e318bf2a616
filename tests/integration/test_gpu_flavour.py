"""`status --json` and `init --no-wait` as processes on the fixture hosts whose GPUs the loaded module
flavour cannot drive (tests/fixtures/hosts/talos-1.13-{b200-proprietary,tesla-p40-open,h100-proprietary})."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.hostenv import USERSPACE, Host, make_host


@pytest.fixture
def host(tmp_path: Path) -> Callable[[str], Host]:
    count = iter(range(100))
    return lambda scenario: make_host(tmp_path / f"h{next(count)}", scenario, USERSPACE)


def test_status_json_shows_the_pci_gpus_and_the_error(host: Callable[[str], Host]) -> None:
    h = host("talos-1.13-b200-proprietary")
    done = h.run("status", "--json")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert len(doc["pci_gpus"]) == 8 and doc["nvidia"]["flavour"] == "proprietary"
    assert doc["pci_gpus"][0] == {
        "address": "0000:18:00.0",
        "pci_id": "10de:2901",
        "class": "0x030200",
        "driver": "nvidia",
        "generation": "Blackwell",
        "open": "yes",
        "proprietary": "no",
    }
    (gpu,) = [f for f in doc["findings"] if f["code"] == "FLAVOUR_CANNOT_DRIVE_GPU"]
    assert gpu["severity"] == "error" and "nvidia-open-gpu-kernel-modules" in gpu["fix"]
    text = h.run("status")
    assert "PCI GPU 0000:18:00.0 10de:2901 Blackwell: open modules yes, proprietary no (driver nvidia)" in text.stdout


def test_init_refuses_a_node_whose_only_gpu_the_open_modules_cannot_drive(host: Callable[[str], Host]) -> None:
    h = host("talos-1.13-tesla-p40-open")
    done = h.run("init", "--no-wait")
    assert done.returncode == 1
    assert "verification failed" in done.stderr and "FLAVOUR_CANNOT_DRIVE_GPU" in done.stderr
    assert "nonfree-kmod-nvidia-production or -lts" in done.stderr
    assert not h.driver_root.exists()
    assert h.tool_calls() == []


def test_init_publishes_where_the_flavour_drives_the_gpu(host: Callable[[str], Host]) -> None:
    h = host("talos-1.13-h100-proprietary")
    done = h.run("init", "--no-wait")
    assert done.returncode == 0, done.stderr
    assert "FLAVOUR_CANNOT_DRIVE_GPU" not in done.stderr
