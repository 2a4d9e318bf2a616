"""Every parser of untrusted input, as one callable per name, with real samples to mutate.

Shared by the property tests (tests/property) and the fuzz script
(bench/fuzz.py): a target takes arbitrary bytes and may raise only ``DriverContainerError``
subclasses (the issue-9 contract).
The samples come from the fixture trees (real files or exact copies of real kernel output).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from driver_container.driverroot.manifest import parse_manifest
from driver_container.findings import values_equal
from driver_container.formats.elfarch import elf_machine
from driver_container.formats.kernel.devices import parse_mig_minors, parse_proc_devices
from driver_container.formats.kernel.modules import parse_proc_modules
from driver_container.formats.kernel.mountinfo import parse_mount_points
from driver_container.formats.kernel.nvidia_proc import (
    gpu_from_information,
    parse_gpu_information,
    parse_nvidia_params,
    parse_nvidia_version,
)
from driver_container.formats.kmod import format_modinfo, to_json
from driver_container.formats.ldcache import parse_ld_cache
from driver_container.formats.modconf import driver_major, parse_module_conf
from driver_container.inspect.platform import parse_os_release
from driver_container.kube.answers import retry_after as _retry_after
from driver_container.kube.kubeconfig import parse_kubeconfig
from driver_container.readers.elf import read_elf_deps
from driver_container.readers.kmod import read_module
from driver_container.settings import parse_seconds
from helpers.support import FIXTURES

HOST = FIXTURES / "hosts" / "talos-1.13-open-595"
USERSPACE = FIXTURES / "userspace" / "debian-595.91.07"
SAMPLES = FIXTURES / "samples"
# Small cap so a decompression bomb or a huge claimed size must hit it, never allocate for real.
MODULE_CAP = 1 << 20

# Copied from a Linux 6.x /proc/devices (character and block sections, as the kernel prints them).
PROC_DEVICES = (
    "Character devices:\n  1 mem\n  4 /dev/vc/0\n  5 /dev/tty\n195 nvidia-frontend\n"
    "234 nvidia-uvm\n235 nvidia-caps\n236 nvidia-caps-imex-channels\n\nBlock devices:\n  7 loop\n259 blkext\n"
)
# /proc/self/mountinfo lines in the kernel's format (fs/proc_namespace.c), with a \040 escape.
MOUNTINFO = (
    "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n"
    "31 22 0:26 / /run/nvidia/driver rw,nosuid shared:12 - tmpfs tmpfs rw,size=65536k\n"
    "32 22 0:27 / /run/nvidia/driver\\040(deleted) ro - overlay overlay ro,lowerdir=/a:/b\n"
)
# The layout kubectl writes (tests/unit/kube/test_kubeconfig.py has the variants).
KUBECONFIG = (
    "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: Y2E=\n    server: https://10.5.0.2:6443\n"
    "  name: c\ncontexts:\n- context:\n    cluster: c\n    user: u\n  name: x\ncurrent-context: x\n"
    "kind: Config\npreferences: {}\nusers:\n- name: u\n  user:\n    token: abc\n    port: 6443\n"
)
# /proc/driver/nvidia-caps/mig-minors as the NVIDIA driver prints it (name, minor).
MIG_MINORS = "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n"


def _module(data: bytes) -> None:
    info = read_module(data, max_size=MODULE_CAP, filename="fuzz.ko")
    format_modinfo(info)  # the printing path walks every field and the signature
    to_json(info)


def _text(parse: Callable[[str], object]) -> Callable[[bytes], None]:
    def run(data: bytes) -> None:
        # The readers decode with errors="replace" (resolver.Root.read_text); do the same.
        parse(data.decode("utf-8", errors="replace"))

    return run


@dataclass(frozen=True)
class Target:
    run: Callable[[bytes], object]
    samples: tuple[Path, ...] = ()
    inline: tuple[bytes, ...] = ()

    def seeds(self) -> list[bytes]:
        return [p.read_bytes() for p in self.samples] + list(self.inline)


class _Response:
    """What kube.answers.retry_after reads of an answer (manager/transport.Answer)."""

    def __init__(self, retry_after: str) -> None:
        self.headers = {"Retry-After": retry_after}


TARGETS: dict[str, Target] = {
    "module": Target(_module, tuple(FIXTURES / "modules" / n for n in ("nvidia.ko", "nvidia.ko.xz", "nvidia.ko.zst"))),
    "os_release": Target(_text(parse_os_release), (HOST / "host/etc/os-release",)),
    "proc_modules": Target(_text(parse_proc_modules), (HOST / "proc/modules",)),
    "nvidia_version": Target(_text(parse_nvidia_version), (HOST / "proc/driver/nvidia/version",)),
    "nvidia_params": Target(_text(parse_nvidia_params), (HOST / "proc/driver/nvidia/params",)),
    "gpu_information": Target(
        _text(lambda text: gpu_from_information("0000:01:00.0", parse_gpu_information(text))),
        (HOST / "proc/driver/nvidia/gpus/0000:01:00.0/information",),
    ),
    "kubeconfig": Target(_text(parse_kubeconfig), inline=(KUBECONFIG.encode(),)),
    "retry_after": Target(_text(lambda text: _retry_after(_Response(text), 1.0, 30.0)), inline=(b"7", b"120")),  # type: ignore[arg-type]
    "seconds": Target(_text(lambda text: parse_seconds("X", text, 1.0)), inline=(b"300", b"1.5")),
    "driver_version": Target(_text(driver_major), inline=(b"595.91.07", b"515.76")),
    "parameter_value": Target(_text(lambda text: values_equal(text, "0x10")), inline=(b"16", b"0x10", b"Y")),
    "elf_machine": Target(elf_machine, (USERSPACE / "usr/lib/x86_64-linux-gnu/libfixturedep.so.2.0.0",)),
    "proc_devices": Target(_text(parse_proc_devices), inline=(PROC_DEVICES.encode(),)),
    "mig_minors": Target(_text(parse_mig_minors), inline=(MIG_MINORS.encode(),)),
    "module_conf": Target(_text(parse_module_conf), (HOST / "drivers/nvidia.conf",)),
    "manifest": Target(_text(parse_manifest), (SAMPLES / "manifest.json",)),
    "mountinfo": Target(_text(parse_mount_points), inline=(MOUNTINFO.encode(),)),
    "ld_cache": Target(parse_ld_cache, (USERSPACE / "etc/ld.so.cache",)),
    "elf_deps": Target(
        lambda data: read_elf_deps(data, name="fuzz.so"),
        (USERSPACE / "usr/lib/x86_64-linux-gnu/libfixturedep.so.2.0.0",),
    ),
}
