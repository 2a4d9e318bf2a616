"""A copy of the 595 fixture host (tests/fixtures/hosts/talos-1.13-h100-proprietary) whose H100 is another GPU.

``swap_h100`` rewrites, in a copy, what names the H100 at 0000:01:00.0: its sysfs ``device``, its line of
/proc/bus/pci/devices; a GPU NVIDIA dropped is not bound, so its ``driver`` link and its
/proc/driver/nvidia/gpus entry go. ``put_gpu_list`` places a supported-gpus.json where the image keeps it.
"""

from __future__ import annotations

from pathlib import Path

from driver_container.base.paths import HostPaths

H100_ADDRESS = "0000:01:00.0"
H100_SYSFS = f"sys/devices/pci0000:00/0000:00:01.0/{H100_ADDRESS}"


def swap_h100(tree: Path, device: int) -> None:
    """In ``tree`` (a copy of the h100 fixture host): the GPU at 0000:01:00.0 is ``10de:<device>``, unbound."""
    (tree / H100_SYSFS / "device").write_text(f"0x{device:04x}\n")
    (tree / H100_SYSFS / "driver").unlink()
    listing = tree / "proc/bus/pci/devices"
    listing.write_text(listing.read_text().replace("10de2331", f"10de{device:04x}"))
    info = tree / "proc/driver/nvidia/gpus" / H100_ADDRESS
    for entry in info.iterdir():
        entry.unlink()
    info.rmdir()


def put_gpu_list(userspace: Path, data: bytes) -> Path:
    """``data`` as the image's supported-gpus.json at its production path below ``userspace``."""
    target = userspace / str(HostPaths().supported_gpus_file).lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target
