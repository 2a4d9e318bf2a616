"""Kernel module files decoded: compression, ELF ``.modinfo``, the appended signature, kmod-identical printing
(readers/kmod.py opens the files).

Light at import time (no pyelftools, no zstandard): status and probe commands import this package. The
printing (``format``) is imported on first use (PEP 562 ``__getattr__``): ``init`` and ``status`` read
module files but never print them as modinfo does (~1 ms of every start, bench/startup.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver_container.formats.kmod.decode import DEFAULT_MAX_SIZE, decode_module
from driver_container.formats.kmod.model import ModuleInfo, ModuleParameter, Signature

if TYPE_CHECKING:
    from driver_container.formats.kmod.format import format_modinfo, to_json

__all__ = [
    "DEFAULT_MAX_SIZE",
    "ModuleInfo",
    "ModuleParameter",
    "Signature",
    "decode_module",
    "format_modinfo",
    "to_json",
]

_ON_FIRST_USE = {"format_modinfo", "to_json"}


def __getattr__(name: str) -> object:
    if name in _ON_FIRST_USE:
        from driver_container.formats.kmod import format  # lazy, hot path: see the module doc

        return getattr(format, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
