"""`status --json` and `init --no-wait` as processes on the fixture hosts whose GPUs the loaded module
flavour or branch cannot drive (tests/fixtures/hosts/talos-1.13-{b200-proprietary,tesla-p40-open,h100-proprietary},
the last with its H100 swapped for a V100 or a P100: helpers/gpuswap.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.gpuswap import put_gpu_list, swap_h100
from helpers.hostenv import USERSPACE, Host, make_host
from helpers.support import FIXTURES


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
        "last_branch": None,
        "name": "",
        "rules": "table",
    }
    (gpu,) = [f for f in doc["findings"] if f["code"] == "FLAVOUR_CANNOT_DRIVE_GPU"]
    assert gpu["severity"] == "error" and "nvidia-open-gpu-kernel-modules" in gpu["fix"]
    text = h.run("status")
    assert "PCI GPU 0000:18:00.0 10de:2901 Blackwell: open modules yes, proprietary no (driver nvidia)" in text.stdout


def test_init_refuses_a_node_whose_only_gpu_the_595_driver_dropped(host: Callable[[str], Host]) -> None:
    h = host("talos-1.13-tesla-p40-open")
    done = h.run("init", "--no-wait")
    assert done.returncode == 1
    assert "verification failed" in done.stderr and "DRIVER_DROPPED_GPU" in done.stderr
    assert "nonfree-kmod-nvidia-lts" in done.stderr and "-production or -lts" not in done.stderr
    assert not h.driver_root.exists()
    assert h.tool_calls() == []


@pytest.mark.parametrize(("device", "label"), [(0x1DB4, "Volta"), (0x15F8, "Pascal")])
def test_init_refuses_a_v100_or_p100_on_the_595_host_and_status_shows_it(
    host: Callable[[str], Host], device: int, label: str
) -> None:
    h = host("talos-1.13-h100-proprietary")
    swap_h100(h.root, device)
    done = h.run("init", "--no-wait")
    assert done.returncode == 1, done.stderr
    assert "verification failed" in done.stderr and "DRIVER_DROPPED_GPU" in done.stderr
    assert f"10de:{device:04x} ({label}) at 0000:01:00.0: last driven by the 580 branch" in done.stderr
    assert "595.91.07" in done.stderr and "nonfree-kmod-nvidia-lts" in done.stderr
    assert not h.driver_root.exists() and h.status() == "NotReady"
    shown = h.run("status")
    assert shown.returncode == 1
    assert "DRIVER_DROPPED_GPU" in shown.stdout + shown.stderr
    assert f"10de:{device:04x} {label}: open modules no, proprietary yes, last branch 580" in shown.stdout


def test_init_judges_by_the_images_supported_gpus_json(host: Callable[[str], Host]) -> None:
    gpu_list = (FIXTURES / "supported-gpus/supported-gpus-595.json").read_bytes()
    h = host("talos-1.13-h100-proprietary")
    put_gpu_list(h.userspace, gpu_list)
    assert h.run("init", "--no-wait").returncode == 0  # the list drives the H100
    k80 = host("talos-1.13-h100-proprietary")
    swap_h100(k80.root, 0x102D)  # Tesla K80: the table has no row; the list says legacy branch 470
    assert k80.run("init", "--no-wait").returncode == 0  # without the list: nothing known, nothing said
    k80 = host("talos-1.13-h100-proprietary")
    swap_h100(k80.root, 0x102D)
    put_gpu_list(k80.userspace, gpu_list)
    done = k80.run("init", "--no-wait")
    assert done.returncode == 1 and "DRIVER_DROPPED_GPU" in done.stderr
    assert "10de:102d (Tesla K80) at 0000:01:00.0: last driven by the 470 branch" in done.stderr
    assert not k80.driver_root.exists()


def test_init_publishes_where_the_flavour_drives_the_gpu(host: Callable[[str], Host]) -> None:
    h = host("talos-1.13-h100-proprietary")
    done = h.run("init", "--no-wait")
    assert done.returncode == 0, done.stderr
    assert "FLAVOUR_CANNOT_DRIVE_GPU" not in done.stderr
