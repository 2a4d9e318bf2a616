"""gpu-operator's MIG manager against real published roots 535/550/555 (docs/mig.md).

What the manager runs that touches the driver root, read at NVIDIA/mig-parted bd7160f4 (k8s-mig-manager
v0.15.0, the chart's ``migManager.version`` at NVIDIA/gpu-operator a22dbf67):

- ``chroot <DriverRootCtrPath> nvidia-smi`` after applying a config when CDI is enabled
  (pkg/mig/reconfigure/reconfigure.go ``runNvidiaSMI``): with this root the validator's driver-ready file
  says driver root == dev root (cmd/nvidia-validator/driver.go ``getDriverInfo``: ``/driver-root`` for
  both), so this is the branch taken; ``nvidia-smi`` is found through the image's PATH (the manager's
  Dockerfile ``ENV PATH``) inside the chroot.
- NVML as nvidia-mig-parted loads it: go-nvml ``dlopen("libnvidia-ml.so.1", RTLD_LAZY|RTLD_GLOBAL)``
  (vendor/github.com/NVIDIA/go-nvml/pkg/nvml/lib.go), found in the manager's container among the
  libraries the management CDI spec mounts (the image's own libc stays: the root's glibc 2.41 of 550/555
  under the test's Debian 12 loader fails with a GLIBC_PRIVATE symbol error, as it would in a container).
- the management CDI spec (``handleCDI``/``createCDISpec``): ``nvidia-ctk cdi generate --mode=management
  --driver-root=/driver-root --dev-root=/driver-root --vendor=management.nvidia.com --class=gpu
  --nvidia-cdi-hook-path=<toolkit>/toolkit/nvidia-cdi-hook`` piped through two ``nvidia-ctk cdi transform
  root --from=/driver-root --to=/run/nvidia/driver`` into /var/run/cdi/management.nvidia.com-gpu.yaml.
  Here the published root's own path stands for /driver-root and the output goes to the test's tmp dir.

The host copy carries the MIG minors of tests/fixtures/node/h100x2-mig (a real file's lines), so ``init``
makes /dev/nvidia-caps/nvidia-cap* in the root as on a MIG-capable node. Without a GPU nvidia-smi exits 9
and nvmlInit returns 9 (NVML_ERROR_DRIVER_NOT_LOADED); the spec generation needs no GPU at all.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.nvidia_sandbox import run_nvidia
from helpers.published_roots import GRAPHICS, Published, publish_with_init
from helpers.support import FIXTURES
from helpers.toolkit import require_toolkit

from driver_container.formats.kernel.devices import parse_mig_minors

pytestmark = pytest.mark.artefact

MIG_MINORS = FIXTURES / "node/h100x2-mig/proc/driver/nvidia-caps/mig-minors"
# NVIDIA/mig-parted deployments/container/Dockerfile @bd7160f4: ENV PATH of the manager's image.
MANAGER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/busybox"
HOST_DRIVER_ROOT = "/run/nvidia/driver"  # NVIDIA_DRIVER_ROOT = NVIDIA_DEV_ROOT in driver-ready
# docs/deploy/gpu-operator-values.yaml toolkit.installDir + "toolkit/nvidia-cdi-hook" (TransformMIGManager).
CDI_HOOK = "/var/nvidia/toolkit/toolkit/nvidia-cdi-hook"
SMI_MESSAGE = "couldn't communicate with the NVIDIA driver"
AMD64 = tuple(u for u in GRAPHICS if u.arch == "amd64")
NVML_PROBE = (
    "import ctypes, os\n"
    "lib = ctypes.CDLL('libnvidia-ml.so.1', mode=os.RTLD_LAZY | os.RTLD_GLOBAL)\n"
    "lib.nvmlErrorString.restype = ctypes.c_char_p\n"
    "ret = lib.nvmlInit_v2()\n"
    "print(ret, lib.nvmlErrorString(ret).decode())\n"
)


@pytest.fixture(scope="module", params=AMD64, ids=[u.name for u in AMD64])
def mig_root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Published:
    minors = {"proc/driver/nvidia-caps/mig-minors": MIG_MINORS.read_text()}
    return publish_with_init(request.param, tmp_path_factory.mktemp(f"mig-{request.param.name}"), host_files=minors)


def manager_cdi_spec(root: Path, out: Path) -> dict[str, Any]:
    """The manager's three nvidia-ctk commands, in its order, each checked; the spec it writes, parsed."""
    ctk = str(require_toolkit() / "nvidia-ctk")
    generate = [
        ctk,
        "cdi",
        "generate",
        "--mode=management",
        f"--driver-root={root}",
        f"--dev-root={root}",
        "--vendor=management.nvidia.com",
        "--class=gpu",
        f"--nvidia-cdi-hook-path={CDI_HOOK}",
    ]
    done = run_nvidia(generate)
    assert done.returncode == 0, done.stderr
    transform = [ctk, "cdi", "transform", "root", f"--from={root}", f"--to={HOST_DRIVER_ROOT}", "--input=-"]
    first = subprocess.run(transform, input=done.stdout, capture_output=True, text=True, timeout=60, check=False)
    assert first.returncode == 0, first.stderr
    output = out / "management.nvidia.com-gpu.yaml"
    second = subprocess.run(
        [*transform, f"--output={output}"], input=first.stdout, capture_output=True, text=True, timeout=60, check=False
    )
    assert second.returncode == 0, second.stderr
    text = output.read_text()
    assert str(root) not in text  # every host path now names the node's /run/nvidia/driver
    spec: dict[str, Any] = yaml.safe_load(text)
    return spec


def _edits(spec: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    (device,) = spec["devices"]
    assert device["name"] == "all"
    edits = [device["containerEdits"], spec.get("containerEdits", {})]
    return [n for e in edits for n in e.get("deviceNodes", [])], [m for e in edits for m in e.get("mounts", [])]


def test_manager_chroot_nvidia_smi_reaches_the_driver_check(mig_root: Published) -> None:
    done = run_nvidia(["chroot", str(mig_root.driver_root), "nvidia-smi"], env={"PATH": MANAGER_PATH})
    assert done.returncode == 9, done.stdout + done.stderr
    assert SMI_MESSAGE in done.stdout


def test_management_spec_gives_the_manager_nvml_smi_and_the_mig_capabilities(
    mig_root: Published, tmp_path: Path
) -> None:
    nodes, mounts = _edits(manager_cdi_spec(mig_root.driver_root, tmp_path))
    expected = {f"/dev/nvidia-caps/nvidia-cap{m.minor}" for m in parse_mig_minors(MIG_MINORS.read_text())}
    caps = {n["path"]: n.get("hostPath") for n in nodes if n["path"].startswith("/dev/nvidia-caps/")}
    assert caps == {path: HOST_DRIVER_ROOT + path for path in expected}
    # The config capability reaches containers as root's alone (node/devices.py: the RM's OS_RUSR).
    modes = {n["path"]: n.get("fileMode") for n in nodes}
    assert modes["/dev/nvidia-caps/nvidia-cap1"] == 0o400 and modes["/dev/nvidia-caps/nvidia-cap2"] == 0o444
    assert "/dev/nvidiactl" in {n["path"] for n in nodes}
    version = mig_root.userspace.version
    by_name = {os.path.basename(m["containerPath"]): m["hostPath"] for m in mounts}
    triplet = mig_root.userspace.triplet
    assert by_name[f"libnvidia-ml.so.{version}"] == f"{HOST_DRIVER_ROOT}/usr/lib/{triplet}/libnvidia-ml.so.{version}"
    assert by_name["nvidia-smi"] == f"{HOST_DRIVER_ROOT}/usr/bin/nvidia-smi"


def test_nvml_loads_as_mig_parted_loads_it_and_reports_no_driver(mig_root: Published, tmp_path: Path) -> None:
    _, mounts = _edits(manager_cdi_spec(mig_root.driver_root, tmp_path))
    # The manager's container: the spec's library mounts over the image's own libc (never the root's), and
    # the soname link the spec's update-ldcache hook (ldconfig) makes for libnvidia-ml.so.<v>.
    folder = tmp_path / "container-libs"
    folder.mkdir()
    for mount in mounts:
        name = os.path.basename(mount["containerPath"])
        if ".so" in name:
            (folder / name).symlink_to(mig_root.driver_root / Path(mount["hostPath"]).relative_to(HOST_DRIVER_ROOT))
    (folder / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{mig_root.userspace.version}")
    done = run_nvidia(["/usr/bin/python3", "-c", NVML_PROBE], env={"LD_LIBRARY_PATH": str(folder)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "9 Driver Not Loaded"
