"""A fixture host for the report's tests: a copy of the Talos 1.11 kmod 535 node (tests/fixtures/hosts/
talos-1.11-kmod-535, one GPU under /proc/driver/nvidia/gpus) with RUN_DIR, a kernel log stand-in and an
empty image userspace of its own, all under the test's tmp dir; and the archive read back."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

from helpers.support import FIXTURES

from driver_container.base.paths import HostPaths

HOST = FIXTURES / "hosts" / "talos-1.11-kmod-535"
TOP = "nvidia-driver-bug-report"
KMSG = (
    b"6,1201,5690716,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.309.01\n"
    b"6,1202,5690999,-;udevd[80]: starting version 181\n"
)


def report_host(base: Path) -> HostPaths:
    tree = Path(shutil.copytree(HOST, base / "host-tree", symlinks=True))
    (base / "image").mkdir()
    (base / "kmsg").write_bytes(KMSG)
    return HostPaths(
        host_root=tree / "host",
        procfs_root=tree / "proc",
        sysfs_root=tree / "sys",
        userspace_root=base / "image",
        drivers_conf_dir=tree / "drivers",
        run_dir=base / "run",
        host_os_release_override=tree / "host/etc/os-release",
        kmsg_path=base / "kmsg",
    )


def add_script(paths: HostPaths, body: str) -> Path:
    """A stand-in for the image's nvidia-bug-report.sh (a shell script: the real one is /bin/sh too)."""
    script = paths.userspace_root / "usr/bin/nvidia-bug-report.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return script


def unpack(data: bytes) -> dict[str, bytes]:
    """{member name below the top directory: bytes}; every entry must be a plain file under TOP."""
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for entry in tar.getmembers():
            assert entry.isfile() and entry.name.startswith(f"{TOP}/") and ".." not in entry.name.split("/")
            handle = tar.extractfile(entry)
            assert handle is not None
            files[entry.name[len(TOP) + 1 :]] = handle.read()
    return files


def index_of(files: dict[str, bytes]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in json.loads(files["index.json"])["members"]}
