"""Module names and ``modules.dep`` lines (readers/kmod.py ``find_module`` walks the tree).

The tree is ``BASEDIR/lib/modules/KVER``. kmod answers from ``modules.dep`` (written by depmod:
``path: dependency...`` per line, paths relative to the tree); when the file is missing - a fixture
or a hand-made tree - the tree itself is searched. Module names treat ``-`` and ``_`` alike (the
kernel's own rule, kmod's modname_normalize), and a name is the file name up to its first ``.``.
"""

from __future__ import annotations

MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")


def normalize(name: str) -> str:
    return name.replace("-", "_")


def module_name_of(filename: str) -> str | None:
    """``nvidia-uvm.ko.xz`` -> ``nvidia_uvm``; None when the file is not a module file."""
    base = filename.rsplit("/", 1)[-1]
    if not base.endswith(MODULE_SUFFIXES):
        return None
    return normalize(base.split(".", 1)[0])


def module_path_in_dep(text: str, wanted: str) -> str | None:
    for line in text.splitlines():
        path, sep, _deps = line.partition(":")
        if sep and module_name_of(path) == wanted:
            return path
    return None
