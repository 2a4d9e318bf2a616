"""The image's ``supported-gpus.json`` for the GPUs on the PCI bus (reading only; the parser is
formats/supported_gpus.py).

Read only when the node has NVIDIA GPUs to judge, through the one bounded, regular-file-only reader
(``Root.read_bytes`` below USERSPACE_ROOT, base/fileread.py). No file is the ordinary case until the image ships
one: the table of formats/gpu_support.py answers then. A file that cannot be read or parsed is a problem
shown by ``status``, and the table answers too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver_container.base.errors import HostFileNotFound, HostReadError, JsonFormatError
from driver_container.base.problems import Problem
from driver_container.base.records import NamedRecord
from driver_container.formats.supported_gpus import MAX_BYTES, parse_supported_gpus

if TYPE_CHECKING:
    from driver_container.base.paths import HostPaths
    from driver_container.formats.gpu_support import GpuSupport
    from driver_container.formats.kernel.pci import PciFunction


class ListedGpus(NamedRecord):
    listed: dict[int, GpuSupport] | None  # None: no usable list in the image
    problems: tuple[Problem, ...] = ()


def read_listed_gpus(paths: HostPaths, gpus: tuple[PciFunction, ...]) -> ListedGpus:
    """What the image's supported-gpus.json says of each id of ``gpus`` it lists; nothing read without GPUs."""
    if not gpus:
        return ListedGpus(None)
    shown = paths.userspace_root / str(paths.supported_gpus_file).lstrip("/")
    try:
        data = paths.userspace.read_bytes(str(paths.supported_gpus_file), limit=MAX_BYTES)
    except HostFileNotFound:
        return ListedGpus(None)
    except HostReadError as exc:
        return ListedGpus(None, (Problem.of(exc),))
    try:
        return ListedGpus(parse_supported_gpus(data, {g.device for g in gpus}, source=str(shown)))
    except JsonFormatError as exc:
        return ListedGpus(None, (Problem(shown, f"not NVIDIA's supported-gpus.json: {exc}"),))
