"""NVSwitch / NVLink5 detection (readers/fabric.py), the findings it leads to, and status on the fixture hosts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.fakes import add_fabric_to_image
from helpers.support import FIXTURES, fixture_paths

from driver_container.base.paths import HostPaths
from driver_container.findings import check
from driver_container.inspect.hoststate import inspect_host
from driver_container.lifecycle.status_render import status_json
from driver_container.readers.fabric import host_daemons, inspect_fabric
from driver_container.settings import Settings

HOSTS = FIXTURES / "hosts"
H100 = "talos-1.13-hgx-h100-nvswitch"
B200 = "talos-1.13-hgx-b200-nvlink5"


def _copy(tmp_path: Path, scenario: str, *, image: bool = False, nvlsm: bool = True) -> HostPaths:
    root = tmp_path / scenario
    shutil.copytree(HOSTS / scenario, root, symlinks=True)
    if image:
        add_fabric_to_image(root / "userspace", nvlsm=nvlsm)
    paths = fixture_paths(root)
    return paths._replace(fabric_run_dir=tmp_path / "fm-run")


def _codes(paths: HostPaths, settings: Settings | None = None) -> dict[str, str]:
    state = inspect_host(paths, settings or Settings())
    return {f.code: f.severity for f in check(state)}


def test_h100_nvswitch_detected(tmp_path: Path) -> None:
    info = inspect_fabric(_copy(tmp_path, H100))
    assert info is not None and info.kind == "nvswitch"
    assert info.nvswitch_devices == ("0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0")
    assert info.fm_binary is None and info.host_daemons == ()


def test_b200_nvlink5_detected_with_the_usable_port(tmp_path: Path) -> None:
    info = inspect_fabric(_copy(tmp_path, B200, image=True))
    assert info is not None and info.kind == "nvlink5"
    assert info.lpf_devices == ("mlx5_0", "mlx5_1")  # mlx5_2 is a plain NIC
    assert info.management_port is not None
    assert (info.management_port.device, info.management_port.guid_hex) == ("mlx5_1", "0xa088c20300123457")
    assert info.missing_modules == ()
    assert info.nvlsm_binary is not None and info.nvlsm_binary.endswith("/opt/nvidia/nvlsm/sbin/nvlsm")


def test_ordinary_node_reads_nothing_but_one_stat(tmp_path: Path) -> None:
    paths = _copy(tmp_path, "talos-1.13-open-595")
    # Even an NVLink5-looking InfiniBand device is not read without /proc/driver/nvidia-nvswitch
    # (which the nvidia module creates): the gate is one stat.
    ib = paths.sysfs_root / "class/infiniband/mlx5_0/device"
    ib.mkdir(parents=True)
    (ib / "vpd").write_bytes(b"SMDL=SW_MNG")
    assert inspect_fabric(paths) is None
    assert "FABRIC_SYSTEM" not in _codes(paths)
    state = inspect_host(paths, Settings())
    assert status_json(state, check(state))["fabric"] is None
    (paths.procfs_root / "driver/nvidia-nvswitch").mkdir()
    assert inspect_fabric(paths) is not None  # the same tree with the directory is an NVLink5 system


def test_nvswitch_without_fm_in_image_is_an_error(tmp_path: Path) -> None:
    codes = _codes(_copy(tmp_path, H100))
    assert codes["FABRIC_MANAGER_MISSING"] == "error"
    assert "NVLSM_MISSING" not in codes
    assert _codes(_copy(tmp_path / "ok", H100, image=True)) == {
        "FABRIC_SYSTEM": "info",
        "DRIVER_ROOT_NOT_PUBLISHED": "info",
    }


def test_nvlink5_needs_nvlsm_too(tmp_path: Path) -> None:
    codes = _codes(_copy(tmp_path, B200, image=True, nvlsm=False))
    assert codes["NVLSM_MISSING"] == "error" and "FABRIC_MANAGER_MISSING" not in codes
    assert {"FABRIC_MANAGER_MISSING", "NVLSM_MISSING"} <= set(_codes(_copy(tmp_path / "bare", B200)))


def test_nvlink5_missing_modules_warned(tmp_path: Path) -> None:
    paths = _copy(tmp_path, B200, image=True)
    shutil.rmtree(paths.sysfs_root / "module/ib_umad")
    info = inspect_fabric(paths)
    assert info is not None and info.missing_modules == ("ib_umad",)
    assert _codes(paths)["NVLINK5_MODULES_MISSING"] == "warning"


def test_no_usable_port_warned(tmp_path: Path) -> None:
    paths = _copy(tmp_path, B200, image=True)
    for dev in ("mlx5_0", "mlx5_1"):
        (paths.sysfs_root / f"class/infiniband/{dev}/ports/1/cap_mask").write_text("0x2651ec48\n")
    assert _codes(paths)["NVLINK5_NO_MANAGEMENT_PORT"] == "warning"


def test_host_daemon_evidence(tmp_path: Path) -> None:
    paths = _copy(tmp_path, H100)
    paths.fabric_run_dir.mkdir()
    (paths.fabric_run_dir / "nv-fabricmanager.pid").write_text("4242\n")
    assert host_daemons(paths) == ()  # no such process: a stale pid file
    (paths.procfs_root / "4242").mkdir()
    (paths.procfs_root / "4242/comm").write_text("bash\n")
    assert host_daemons(paths) == ()  # pid reused by something else
    (paths.procfs_root / "4242/comm").write_text("nv-fabricmanage\n")  # comm: 15 characters
    assert [(d.name, d.pid) for d in host_daemons(paths)] == [("nv-fabricmanager", 4242)]
    (paths.fabric_run_dir / "nv-fabricmanager.pid").unlink()
    assert [d.pid for d in host_daemons(paths)] == [4242]  # found by the /proc scan (hostPID)
    assert "FABRIC_MANAGER_MISSING" not in _codes(paths)  # the host runs it: nothing missing


def test_talos_extension_counts_as_host_daemon(tmp_path: Path) -> None:
    paths = _copy(tmp_path, H100)
    ext = paths.host_root / "usr/local/etc/containers/nvidia-fabricmanager.yaml"
    ext.parent.mkdir(parents=True)
    ext.write_text("name: nvidia-fabricmanager\n")
    (daemon,) = host_daemons(paths)
    assert daemon.pid is None and "Talos extension" in daemon.evidence
    assert "FABRIC_MANAGER_MISSING" not in _codes(paths)


def test_fabricmanager_false_silences_the_missing_error(tmp_path: Path) -> None:
    codes = _codes(_copy(tmp_path, H100), Settings(fabricmanager="false"))
    assert "FABRIC_MANAGER_MISSING" not in codes and codes["FABRIC_SYSTEM"] == "info"


@pytest.mark.parametrize("as_json", [False, True])
def test_status_reports_the_fabric(tmp_path: Path, as_json: bool, capsys: pytest.CaptureFixture[str]) -> None:
    from driver_container.cli import main

    paths = _copy(tmp_path, B200, image=True)
    args = [
        "--host-root-mount",
        str(paths.host_root),
        "--procfs-root",
        str(paths.procfs_root),
        "--sysfs-root",
        str(paths.sysfs_root),
        "--userspace-root",
        str(paths.userspace_root),
        "--run-dir",
        str(tmp_path / "run"),
        "--drivers-conf-dir",
        str(paths.drivers_conf_dir),
        "--host-os-release",
        str(paths.host_root / "etc/os-release"),
        "--fabricmanager-run-dir",
        str(paths.fabric_run_dir),
        "status",
    ]
    with pytest.raises(SystemExit) as exited:
        main(args + (["--json"] if as_json else []))
    out = capsys.readouterr().out
    assert exited.value.code == 0, out
    if as_json:
        fabric = json.loads(out)["fabric"]
        assert fabric["kind"] == "nvlink5" and fabric["management_port"]["guid"] == "0xa088c20300123457"
        assert fabric["daemons"] == []
    else:
        assert "fabric: nvlink5, 0 NVSwitch device(s), LPF mlx5_0, mlx5_1, management port mlx5_1/1" in out
        assert "  daemons: none running" in out
        assert "INFO FABRIC_SYSTEM: nvlink5 system: Fabric Manager started by init" in out
