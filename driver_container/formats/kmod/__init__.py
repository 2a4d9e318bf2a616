"""Kernel module files: compression, ELF ``.modinfo``, the appended signature, kmod-identical printing.

Light at import time (no pyelftools, no zstandard): status and probe commands import this package.
"""

from driver_container.formats.kmod.format import format_modinfo, to_json
from driver_container.formats.kmod.lookup import find_module
from driver_container.formats.kmod.model import ModuleInfo, ModuleParameter, Signature
from driver_container.formats.kmod.reader import DEFAULT_MAX_SIZE, read_module

__all__ = [
    "DEFAULT_MAX_SIZE",
    "ModuleInfo",
    "ModuleParameter",
    "Signature",
    "find_module",
    "format_modinfo",
    "read_module",
    "to_json",
]
