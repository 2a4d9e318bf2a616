"""Pure parsers of the kernel's character-device registry and NVIDIA's MIG capability minors.

Formats (Linux fs/proc/devices.c; NVIDIA nvidia-caps in open-gpu-kernel-modules):
- ``/proc/devices``: ``Character devices:`` then ``%3d name`` lines, a blank line, ``Block devices:``.
  One major may carry several names (``195 nvidia``, ``195 nvidia-modeset``, ``195 nvidiactl``).
- ``/proc/driver/nvidia-caps/mig-minors``: ``<capability path> <minor>`` per line, e.g.
  ``gpu0/gi1/access 12`` or ``config 1``; the device node is ``nvidia-caps/nvidia-cap<minor>``. It lists
  every capability the module can ever register (NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-caps.c
  @df1c9a3de ``g_nv_cap_mig_table``, ``g_nv_cap_mig_gpu_table``: config, monitor, then 32 GPUs x 15 GIs x
  (access + 8 CIs)), whether or not that GPU or instance exists.
- ``/proc/driver/nvidia/capabilities/<path>``, one file per capability REGISTERED now (same file,
  ``nv_cap_procfs_read``): ``DeviceFileMinor: %d``, ``DeviceFileMode: %d`` (decimal permission bits the
  resource manager registered, e.g. 256 = 0400), ``DeviceFileModify: %d``. Its path puts ``mig/`` after
  the GPU: ``mig/config``, ``gpu0/mig/gi1/access`` (the mig-minors name ``gpu0/gi1/access``).
Text in, frozen data out; lines that do not match are skipped, never guessed.
"""

from __future__ import annotations

from driver_container.base.records import NamedRecord
from driver_container.formats.numbers import parse_uint

# Kernel char-device majors are 12 bits (include/linux/kdev_t.h MINORBITS=20 -> major < 4096).
MAX_MAJOR = 4095
# Minors are 20 bits.
MAX_MINOR = (1 << 20) - 1


class CharDevices(NamedRecord):
    """Character-device majors by name (``/proc/devices``, first section only)."""

    majors: tuple[tuple[str, int], ...]

    def major(self, name: str) -> int | None:
        for found, major in self.majors:
            if found == name:
                return major
        return None

    def names_starting(self, prefix: str) -> tuple[str, ...]:
        return tuple(name for name, _ in self.majors if name.startswith(prefix))


class MigMinor(NamedRecord):
    capability: str  # e.g. "gpu0/gi1/access" or "config"
    minor: int


class CapabilityFile(NamedRecord):
    """One ``/proc/driver/nvidia/capabilities/...`` file."""

    minor: int
    mode: int  # permission bits (0o777 at most)


def parse_proc_devices(text: str) -> CharDevices:
    """Majors of the ``Character devices:`` section; the block section is ignored."""
    majors: list[tuple[str, int]] = []
    in_char = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.endswith("devices:"):
            in_char = line == "Character devices:"
            continue
        if not in_char or not line:
            continue
        number, _, name = line.partition(" ")
        name = name.strip()
        major = parse_uint(number)
        if major is None or not name or " " in name:
            continue
        if major <= MAX_MAJOR:
            majors.append((name, major))
    return CharDevices(tuple(majors))


def parse_mig_minors(text: str) -> tuple[MigMinor, ...]:
    """Entries of ``mig-minors``; malformed lines are skipped."""
    entries: list[MigMinor] = []
    for raw in text.splitlines():
        parts = raw.split()
        minor = parse_uint(parts[1]) if len(parts) == 2 else None
        if minor is None:
            continue
        if minor <= MAX_MINOR:
            entries.append(MigMinor(parts[0], minor))
    return tuple(entries)


def capability_proc_path(capability: str) -> str:
    """The capabilities file of a mig-minors name, relative to ``/proc/driver/nvidia/capabilities``."""
    gpu, sep, rest = capability.partition("/")
    if not sep:
        return f"mig/{capability}"  # config, monitor
    return f"{gpu}/mig/{rest}"


def parse_capability_file(text: str) -> CapabilityFile | None:
    """Minor and mode of a capabilities file; None when either is missing or out of range."""
    fields: dict[str, int] = {}
    for raw in text.splitlines():
        key, sep, value = raw.partition(":")
        number = parse_uint(value.strip()) if sep else None
        if number is not None:
            fields[key.strip()] = number
    minor, mode = fields.get("DeviceFileMinor"), fields.get("DeviceFileMode")
    if minor is None or mode is None or minor > MAX_MINOR or mode > 0o777:
        return None
    return CapabilityFile(minor, mode)
