"""`nvidia-driver status --json` on every host fixture tree: content and exit code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.support import FIXTURES, REPO

from driver_container.driverroot.manifest import Manifest, format_manifest

HOSTS = FIXTURES / "hosts"
ENV_KEYS = ("KERNEL_MODULE_TYPE", "DRIVER_VERSION", "DRIVER_PLATFORM", "NVIDIA_MODESET", "GPU_DIRECT_RDMA_ENABLED")


def scenario_env(scenario: Path) -> dict[str, str]:
    env_file = scenario / "env"
    text = env_file.read_text() if env_file.exists() else ""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def status_argv(scenario: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        "--host-root-mount",
        str(scenario / "host"),
        "--procfs-root",
        str(scenario / "proc"),
        "--sysfs-root",
        str(scenario / "sys"),
        "--userspace-root",
        str(scenario / "userspace"),
        "--drivers-conf-dir",
        str(scenario / "drivers"),
        "--host-os-release",
        str(scenario / "host/etc/os-release"),
        "--run-dir",
        str(run_dir),
        "status",
        *extra,
    ]


def run_status(
    scenario: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any]]:
    from driver_container.cli import main

    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    for key, value in scenario_env(scenario).items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as exited:
        main(status_argv(scenario, tmp_path / "run", "--json"))
    out = capsys.readouterr().out
    assert isinstance(exited.value.code, int)
    return exited.value.code, json.loads(out)


def codes(doc: dict[str, Any], severity: str | None = None) -> set[str]:
    return {f["code"] for f in doc["findings"] if severity is None or f["severity"] == severity}


def module(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in doc["modules"] if m["name"] == name)


# scenario -> (exit code, error codes, warning codes)
EXPECTED: dict[str, tuple[int, set[str], set[str]]] = {
    "talos-1.13-open-595": (0, set(), set()),
    "talos-1.9-open-550": (0, set(), set()),
    "talos-1.13-proprietary-open-requested": (0, set(), {"FLAVOUR_MISMATCH"}),
    "talos-1.13-lts-580-vs-595": (1, {"VERSION_MISMATCH"}, {"FIRMWARE_MISSING"}),
    "talos-1.13-srcversion-mismatch": (1, {"MODULE_FILE_MISMATCH"}, set()),
    "talos-1.13-uvm-missing": (1, {"UVM_NOT_LOADED"}, set()),
    "talos-1.13-unknown-parameter": (0, set(), {"UNKNOWN_PARAMETER"}),  # a warning on Talos: never applied
    "talos-1.13-parameter-differs": (0, set(), {"PARAMETER_DIFFERS"}),
    "builtin-nvidia-custom-kernel": (0, set(), set()),
    "ubuntu-24.04-dkms": (0, set(), set()),
    "talos-1.13-no-proc-modules": (0, set(), set()),
    "talos-1.11-kmod-535": (0, set(), set()),  # firmware where the image keeps it (usr/share/nvidia)
    "talos-1.13-hgx-h100-nvswitch": (1, {"FABRIC_MANAGER_MISSING"}, set()),  # the image lacks FM
    "talos-1.13-hgx-b200-nvlink5": (1, {"FABRIC_MANAGER_MISSING", "NVLSM_MISSING"}, set()),
    # Which flavour drives which GPU (tests/integration/test_gpu_flavour.py has the details).
    # A 595 driver: the P40 and V100 are last driven by the 580 branch.
    "talos-1.13-tesla-p40-open": (1, {"DRIVER_DROPPED_GPU"}, set()),
    "talos-1.13-l4-v100-open": (0, set(), {"DRIVER_DROPPED_GPU"}),
    "talos-1.13-b200-proprietary": (1, {"FLAVOUR_CANNOT_DRIVE_GPU"}, set()),
    "talos-1.13-h100-proprietary": (0, set(), set()),
}


def test_every_fixture_tree_has_an_expectation_and_a_readme() -> None:
    trees = {p.name for p in HOSTS.iterdir() if p.is_dir()}
    assert trees == set(EXPECTED)
    for tree in trees:
        assert "Stands for:" in (HOSTS / tree / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_status_json_exit_code_and_findings(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, doc = run_status(HOSTS / name, tmp_path, monkeypatch, capsys)
    exit_code, errors, warnings = EXPECTED[name]
    assert (rc, codes(doc, "error"), codes(doc, "warning")) == (exit_code, errors, warnings)
    assert set(doc) >= {"platform", "modules", "userspace", "driver_root", "findings"}
    root = doc["driver_root"]
    # The mount and the flags are this machine's own (OWN_PROCFS_ROOT, statvfs), not the fixture's view.
    mount, flags = root.pop("mount"), root.pop("flags")
    assert root == {
        "path": str(tmp_path / "run" / "driver"),
        "published": False,
        "version": None,
        "last_publish_failed": False,
        "interrupted": False,
        "usable": None,
        "not_in_image": [],
        # no root published: no shell, nothing mounted at its proc and sys (None: no mount table here)
        "proc_sys": None if mount is None else {"shell": False, "proc": None, "sys": None},
    }
    assert mount is None or str(tmp_path).startswith(mount["mount_point"])
    assert str(tmp_path / "run" / "driver").startswith(flags["path"]) and set(flags) == {"path", "noexec", "nodev"}
    for entry in doc["modules"]:
        assert set(entry) >= {"name", "loaded", "version", "srcversion", "refcnt", "file", "file_version"}
    for finding in doc["findings"]:
        assert finding["severity"] in ("error", "warning", "info") and finding["message"] and finding["fix"]


def test_healthy_talos_113_details(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, doc = run_status(HOSTS / "talos-1.13-open-595", tmp_path, monkeypatch, capsys)
    assert doc["platform"] == {
        "name": "talos",
        "talos_version": "v1.13.9",
        "evidence": "os-release ID=talos",
        "kernel_release": "6.18.44-talos",
        "os_id": "talos",
        "pretty_name": "Talos (v1.13.9)",
    }
    nvidia = module(doc, "nvidia")
    assert nvidia["loaded"] and nvidia["refcnt"] == 82 and nvidia["version"] == "595.91.07"
    assert nvidia["file"] == "/usr/lib/modules/6.18.44-talos/kernel/drivers/video/nvidia.ko"
    assert nvidia["file_version"] == "595.91.07" and nvidia["file_srcversion"] == nvidia["srcversion"]
    assert sorted(nvidia["holders"]) == ["nvidia_modeset", "nvidia_uvm"]
    assert module(doc, "nvidia_drm")["loaded"] is False
    assert doc["userspace"]["version"] == "595.91.07"
    assert doc["nvidia"]["gpus"][0]["device_minor"] == 0 and doc["nvidia"]["flavour"] == "open"
    assert codes(doc) == {"DRIVER_ROOT_NOT_PUBLISHED"}


def test_published_driver_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "run/driver/.driver-container/manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(format_manifest(Manifest("595.91.07", "x86_64-linux-gnu", ())))
    _, doc = run_status(HOSTS / "talos-1.13-open-595", tmp_path, monkeypatch, capsys)
    assert doc["driver_root"]["published"] is True and doc["driver_root"]["version"] == "595.91.07"
    # A manifest alone is no usable root: the proof before Ready (driverroot/proof.py) has nothing to run.
    assert codes(doc) == {"DRIVER_ROOT_NOT_EXECUTABLE"}
    assert doc["driver_root"]["usable"]["failures"][0].startswith("sbin/ldconfig.real is not a regular file")
    root = manifest.parent.parent
    (root / "sbin").mkdir()
    shutil.copy2(shutil.which("ldconfig") or "/sbin/ldconfig", root / "sbin/ldconfig.real")
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    shutil.copy2(root / "sbin/ldconfig.real", root / "usr/lib/x86_64-linux-gnu/libcuda.so.1")
    _, doc = run_status(HOSTS / "talos-1.13-open-595", tmp_path, monkeypatch, capsys)
    assert doc["findings"] == [] and doc["driver_root"]["usable"] == {"ok": True, "failures": []}
    manifest.write_text("{}")  # not a manifest this code wrote: nothing claims to be published
    _, doc = run_status(HOSTS / "talos-1.13-open-595", tmp_path, monkeypatch, capsys)
    assert doc["driver_root"]["published"] is False


def test_talos_19_reads_lib_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, doc = run_status(HOSTS / "talos-1.9-open-550", tmp_path, monkeypatch, capsys)
    assert doc["platform"]["talos_version"] == "v1.9.0"
    assert module(doc, "nvidia")["file"] == "/lib/modules/6.12.5-talos/kernel/drivers/video/nvidia.ko"


def test_ubuntu_compressed_dkms_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, doc = run_status(HOSTS / "ubuntu-24.04-dkms", tmp_path, monkeypatch, capsys)
    assert (doc["platform"]["name"], doc["platform"]["os_id"]) == ("generic", "ubuntu")
    # /lib -> usr/lib on Ubuntu (usr-merged), so the file is seen once, under /usr/lib/modules.
    assert module(doc, "nvidia_uvm")["file"] == "/usr/lib/modules/6.8.0-87-generic/updates/dkms/nvidia-uvm.ko.zst"
    assert doc["userspace"]["libcuda"] == "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.595.91.07"


def test_parameter_differs_fix_fits_the_talos_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # One form, the one the node's Talos version supports: never the same module configured both ways.
    _, doc = run_status(HOSTS / "talos-1.13-parameter-differs", tmp_path, monkeypatch, capsys)
    fix = next(f["fix"] for f in doc["findings"] if f["code"] == "PARAMETER_DIFFERS" and "nvidia:" in f["message"])
    assert "machine:\n  kernel:\n    modules:\n      - name: nvidia\n" in fix
    assert "kind: KernelModuleConfig" not in fix.split("\n", 1)[1]
    assert "- NVreg_EnableGpuFirmware=0" in fix
    tree = tmp_path / "v1.14"
    shutil.copytree(HOSTS / "talos-1.13-parameter-differs", tree, symlinks=True)
    release = tree / "host/etc/os-release"
    release.write_text(release.read_text().replace("v1.13.9", "v1.14.0"))
    _, doc = run_status(tree, tmp_path / "run14", monkeypatch, capsys)
    fix = next(f["fix"] for f in doc["findings"] if f["code"] == "PARAMETER_DIFFERS" and "nvidia:" in f["message"])
    assert "apiVersion: v1alpha1\nkind: KernelModuleConfig\nname: nvidia\nparameters:\n" in fix
    assert "machine:\n" not in fix and "- NVreg_EnableGpuFirmware=0" in fix


def test_builtin_modules_are_loaded_and_flagged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, doc = run_status(HOSTS / "builtin-nvidia-custom-kernel", tmp_path, monkeypatch, capsys)
    nvidia = module(doc, "nvidia")
    assert (nvidia["loaded"], nvidia["builtin"], nvidia["refcnt"]) == (True, True, None)
    assert "BUILTIN_MODULE" in codes(doc, "info")


def test_driver_version_env_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "scenario"
    shutil.copytree(HOSTS / "talos-1.13-open-595", scenario, symlinks=True)
    (scenario / "env").write_text("DRIVER_VERSION=595.91.08\n")
    rc, doc = run_status(scenario, tmp_path, monkeypatch, capsys)
    assert rc == 1 and codes(doc, "error") == {"USERSPACE_VERSION_MISMATCH"}


def test_usage_error_exit_2(tmp_path: Path) -> None:
    scenario = HOSTS / "talos-1.13-open-595"
    env = {**os.environ, "KERNEL_MODULE_TYPE": "closed"}
    proc = subprocess.run(
        [sys.executable, "-m", "driver_container", *status_argv(scenario, tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 2, proc.stderr
    assert "KERNEL_MODULE_TYPE='closed'" in proc.stderr and "Traceback" not in proc.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "driver_container", "status", "--no-such-option"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert bad.returncode == 2


LIGHT_PROBE = """
import sys
from driver_container.driverroot.manifest import Manifest, format_manifest
from driver_container.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = ("elftools", "requests", "zstandard", "driver_container.readers.kmod")
print("HEAVY=" + ",".join(m for m in heavy if m in sys.modules), file=sys.stderr)
sys.exit(code)
"""


def test_status_stays_light_without_module_files(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario"
    shutil.copytree(HOSTS / "builtin-nvidia-custom-kernel", scenario, symlinks=True)
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    proc = subprocess.run(
        [sys.executable, "-c", LIGHT_PROBE, *status_argv(scenario, tmp_path, "--json")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY=\n" in proc.stderr
    # The same probe sees the module reader (and zstandard for .ko.zst) once module files are read.
    with_files = subprocess.run(
        [sys.executable, "-c", LIGHT_PROBE, *status_argv(HOSTS / "ubuntu-24.04-dkms", tmp_path, "--json")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert "driver_container.readers.kmod" in with_files.stderr and "zstandard" in with_files.stderr
