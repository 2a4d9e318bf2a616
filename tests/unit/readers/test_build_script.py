"""tests/fixtures/modules/build.sh makes the NVIDIA-like variants host fixture trees use."""

from __future__ import annotations

import glob
import shutil
import subprocess
from pathlib import Path

from helpers.support import MODULES, require

from driver_container.formats.kmod import ModuleParameter
from driver_container.readers.kmod import read_module


def test_variant_options(tmp_path: Path) -> None:
    require(
        glob.glob("/usr/src/linux-headers-*-amd64") and shutil.which("gcc"),
        "kbuild headers and gcc",
        how="apt-get install linux-headers-amd64 gcc",
    )
    argv = [
        "bash",
        str(MODULES / "build.sh"),
        "--out",
        str(tmp_path),
        "--name",
        "nvidia-uvm",
        "--version",
        "580.1.2",
        "--license",
        "NVIDIA",
        "--vermagic",
        "6.18.24-talos SMP preempt mod_unload ",
        "--srcversion",
        "0123456789ABCDEF0123456",
        "--firmware",
        "nvidia/580.1.2/gsp_ga10x.bin",
        "--param",
        "uvm_perf:uint",
        "--set",
        "depends=nvidia",
        "--no-sign",
        "--compress",
        "zstd",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(tmp_path / "nvidia-uvm.ko")
    plain, packed = read_module(tmp_path / "nvidia-uvm.ko"), read_module(tmp_path / "nvidia-uvm.ko.zst")
    assert plain.fields == packed.fields
    assert (plain.name, plain.version, plain.license) == ("nvidia_uvm", "580.1.2", "NVIDIA")
    assert plain.vermagic == "6.18.24-talos SMP preempt mod_unload "
    assert (plain.srcversion, plain.get("depends")) == ("0123456789ABCDEF0123456", "nvidia")
    assert plain.firmware == ["nvidia/580.1.2/gsp_ga10x.bin"]
    assert plain.parameters == {"uvm_perf": ModuleParameter("uvm_perf", "fixture parameter uvm_perf", "uint")}
    assert plain.signature is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nvidia-uvm.ko", "nvidia-uvm.ko.zst"]
