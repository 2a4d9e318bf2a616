"""NVIDIA's ``supported-gpus.json``: which GPUs one driver release drives, and with which module flavour
(pure: the file's bytes in, one ``GpuSupport`` per wanted PCI device id out).

NVIDIA ships the file in every driver archive (``supported-gpus/supported-gpus.json``); NVIDIA's own driver
container reads it at ``/usr/share/nvidia-driver-assistant/supported-gpus/supported-gpus.json``
(NVIDIA/gpu-driver-container gpu-driver-util/main.go ``DefaultSupportedGpusJsonPath`` @ 35a18d94bc97).
Its form: an object whose ``chips`` is a list of objects, each with ``devid`` (``"0x1DB4"``), ``name``,
``features`` (a list of words) and, where the release no longer drives the GPU, ``legacybranch`` (``"580.xx"``:
the branch that still does); ``subdevid`` and ``subvendorid`` name one board of an id.

The rules, as gpu-driver-util reads the features (same file, ``getDriverHints``) and
scripts/make-gpu-ids.py derives the fallback table:

- ``kernelopen`` and ``gsp_proprietary_supported``: both flavours; ``kernelopen`` alone: the open modules
  only (GH200, Blackwell); no ``kernelopen``: the proprietary modules only (Maxwell, Pascal, Volta).
- ``legacybranch``: this release drives the GPU in neither flavour; ``last_branch`` is that branch (the
  features still say which flavour of that branch drives it: ``GpuSupport.dropped`` is checked first).
- An id with one entry of this release (no ``legacybranch``) is driven: board entries (``subdevid``) of one
  id carry the same features in NVIDIA's lists (make-gpu-ids.py stops on a disagreement), so the entry
  without ``subdevid`` speaks for the id, else the first.

Every way the document can be wrong (too large, not JSON, a ``chips`` entry of the wrong shape) is one
``JsonFormatError``: the caller then keeps the table (formats/gpu_support.py) and says why.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from driver_container.base.errors import JsonFormatError
from driver_container.formats.boundedjson import decode_object
from driver_container.formats.gpu_support import GpuSupport, Support, gpu_support
from driver_container.formats.numbers import driver_branch

# NVIDIA's file of the 595 branch is ~0.6 MB (every id since the RIVA TNT, with board entries); room for growth.
MAX_BYTES = 8 << 20
OPEN = "kernelopen"
PROPRIETARY_TOO = "gsp_proprietary_supported"


def _text(chip: dict[str, Any], key: str, at: int) -> str | None:
    value = chip.get(key)
    if value is not None and not isinstance(value, str):
        raise JsonFormatError(f"chips[{at}].{key}: a {type(value).__name__} where a string belongs")
    return value


def _devid(chip: dict[str, Any], at: int) -> str:
    """``devid`` lower-cased, as ``0x`` and four hex digits are written (``"0x1DB4"``); checked cheaply for
    every entry (a few thousand), the hex digits only for the wanted ones (``parse_supported_gpus``)."""
    text = chip.get("devid")
    if not isinstance(text, str) or len(text) != 6 or text[:2] not in ("0x", "0X"):
        raise JsonFormatError(f"chips[{at}].devid: {str(text)[:40]!r} is not a PCI device id (0x and 4 hex digits)")
    return text.lower()


def _features(chip: dict[str, Any], at: int) -> frozenset[str]:
    value = chip.get("features", [])
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        raise JsonFormatError(f"chips[{at}].features: not a list of strings")
    return frozenset(value)


def _support(device: int, chip: dict[str, Any], at: int, source: str) -> GpuSupport:
    features = _features(chip, at)
    legacy = _text(chip, "legacybranch", at)
    last = None if legacy is None else driver_branch(legacy)
    if legacy is not None and last is None:
        raise JsonFormatError(f"chips[{at}].legacybranch: {legacy[:40]!r} does not start with a branch number")
    open_: Support = "yes" if OPEN in features else "no"
    proprietary: Support = "yes" if open_ == "no" or PROPRIETARY_TOO in features else "no"
    table = gpu_support(device)
    generation = table.generation if table is not None else ""
    name = (_text(chip, "name", at) or "")[:80]
    return GpuSupport(device, generation, open_, proprietary, last, name, source)


def parse_supported_gpus(data: bytes, wanted: Iterable[int], *, source: str) -> dict[int, GpuSupport]:
    """What the release whose ``supported-gpus.json`` is ``data`` does with each PCI device id of ``wanted``
    that the file lists (ids it does not list are left out). ``source`` names the file in messages."""
    document = decode_object(data, limit=MAX_BYTES)
    chips = document.get("chips")
    if not isinstance(chips, list):
        raise JsonFormatError("no 'chips' list")
    ids = {f"0x{device:04x}": device for device in wanted}
    found: dict[int, tuple[tuple[bool, bool], GpuSupport]] = {}
    for at, chip in enumerate(chips):
        if not isinstance(chip, dict):
            raise JsonFormatError(f"chips[{at}]: a {type(chip).__name__} where an object belongs")
        device = ids.get(_devid(chip, at))
        if device is None:
            continue
        support = _support(device, chip, at, source)
        # This release's entry before a legacy one, the id's own entry before a board's; the first on a tie.
        rank = (support.last_branch is not None, chip.get("subdevid") is not None)
        if device not in found or rank < found[device][0]:
            found[device] = (rank, support)
    return {device: support for device, (_, support) in found.items()}
