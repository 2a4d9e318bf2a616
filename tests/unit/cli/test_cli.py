"""`nvidia-driver modinfo` options beyond kmod's: --json, and the defaults taken from the host roots."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.support import MODULES

from driver_container.cli import main


def _run(args: list[str], capsysbinary: pytest.CaptureFixture[bytes]) -> tuple[int, bytes, bytes]:
    with pytest.raises(SystemExit) as done:
        main(args)
    out = capsysbinary.readouterr()
    return int(done.value.code or 0), out.out, out.err


def test_json(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, err = _run(["modinfo", "--json", str(MODULES / "nvidia.ko.zst")], capsysbinary)
    assert (code, err) == (0, b"")
    [record] = json.loads(out)
    assert record["filename"] == str(MODULES / "nvidia.ko.zst")
    assert (record["name"], record["version"], record["compression"]) == ("nvidia", "595.91.07", "zstd")
    assert record["firmware"] == ["nvidia/595.91.07/gsp_tu10x.bin", "nvidia/595.91.07/gsp_ga10x.bin"]
    assert [p["name"] for p in record["parameters"]] == ["NVreg_EnableGpuFirmware", "NVreg_RegistryDwords"]
    assert record["signature"]["sig_hashalgo"] == "sha512"
    assert ["license", "Dual MIT/GPL"] in record["fields"]


def test_json_field_and_errors(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    code, out, err = _run(
        ["modinfo", "--json", "-F", "firmware", str(MODULES / "nvidia.ko"), str(tmp_path / "gone.ko")], capsysbinary
    )
    assert code == 1
    assert json.loads(out) == [
        {
            "filename": str(MODULES / "nvidia.ko"),
            "firmware": ["nvidia/595.91.07/gsp_tu10x.bin", "nvidia/595.91.07/gsp_ga10x.bin"],
        }
    ]
    assert err == f"modinfo: ERROR: {tmp_path}/gone.ko: cannot read: No such file or directory\n".encode()


def test_name_lookup_defaults_to_host_root_and_running_kernel(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    # Stands for the pod's view: the host tree under --host-root-mount, the kernel release from procfs.
    host, proc = tmp_path / "host", tmp_path / "proc"
    extras = host / "lib" / "modules" / "6.18.24-talos" / "extras"
    extras.mkdir(parents=True)
    shutil.copy(MODULES / "nvidia.ko.xz", extras / "nvidia.ko.xz")
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "kernel" / "osrelease").write_text("6.18.24-talos\n")
    code, out, _ = _run(
        ["--host-root-mount", str(host), "--procfs-root", str(proc), "modinfo", "-F", "filename", "nvidia"],
        capsysbinary,
    )
    assert (code, out) == (0, f"{extras}/nvidia.ko.xz\n".encode())
    code, _, err = _run(
        ["--host-root-mount", str(host), "--procfs-root", str(proc), "modinfo", "nvidia-drm"], capsysbinary
    )
    assert code == 1
    assert err.startswith(b"modinfo: ERROR: module nvidia-drm not found for kernel 6.18.24-talos under ")
