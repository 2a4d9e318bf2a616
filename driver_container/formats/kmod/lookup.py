"""Finding a module file by name in a module tree, like ``modinfo -b BASEDIR -k KVER NAME``.

The tree is ``BASEDIR/lib/modules/KVER``. kmod answers from ``modules.dep`` (written by depmod:
``path: dependency...`` per line, paths relative to the tree); when the file is missing - a fixture
or a hand-made tree - the tree itself is searched. Module names treat ``-`` and ``_`` alike (the
kernel's own rule, kmod's modname_normalize), and a name is the file name up to its first ``.``.
All access goes through ``Root`` so links inside the tree cannot lead outside BASEDIR.
"""

from __future__ import annotations

import logging
from pathlib import Path, PurePosixPath

from driver_container.errors import HostReadError, ModuleNotFoundInTreeError
from driver_container.paths import Root

log = logging.getLogger(__name__)

MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")
# modules.dep of a full distribution kernel is well under 1 MiB (~6000 modules of ~100 bytes a line); the
# scan below costs ~0.25 s a MiB of short lines, so 8 MiB keeps a crafted file within a few seconds
# (64 MiB of "a:" lines took 17 s).
_DEP_LIMIT = 8 << 20


def normalize(name: str) -> str:
    return name.replace("-", "_")


def module_name_of(filename: str) -> str | None:
    """``nvidia-uvm.ko.xz`` -> ``nvidia_uvm``; None when the file is not a module file."""
    base = filename.rsplit("/", 1)[-1]
    if not base.endswith(MODULE_SUFFIXES):
        return None
    return normalize(base.split(".", 1)[0])


def _from_modules_dep(text: str, wanted: str) -> str | None:
    for line in text.splitlines():
        path, sep, _deps = line.partition(":")
        if sep and module_name_of(path) == wanted:
            return path
    return None


def find_module(name: str, kver: str, basedir: Path) -> Path:
    """The real path of module ``name`` for kernel ``kver`` under ``basedir``."""
    root = Root(basedir)
    tree = PurePosixPath("/lib/modules") / kver
    wanted = normalize(name)
    try:
        dep = root.read_text_or_none(tree / "modules.dep", limit=_DEP_LIMIT)
        if dep is not None:
            found = _from_modules_dep(dep, wanted)
            if found is not None:
                return root.resolve(tree / found)
            log.debug("%s not in %s/modules.dep", wanted, tree)
        elif root.is_dir(tree):
            for inner in root.walk_files(tree):
                if module_name_of(inner.name) == wanted:
                    return root.resolve(inner)
    except HostReadError as exc:
        raise ModuleNotFoundInTreeError(
            f"module {name}: cannot read the tree {basedir}{tree}: {exc}",
            module=name,
            kernel=kver,
            tree=f"{basedir}{tree}",
        ) from exc
    where = "modules.dep" if dep is not None else "the tree"
    if dep is None and not root.is_dir(tree):
        where = "nothing: the directory does not exist"
    raise ModuleNotFoundInTreeError(
        f"module {name} not found for kernel {kver} under {basedir}{tree} (searched {where})",
        module=name,
        kernel=kver,
        tree=f"{basedir}{tree}",
        fix="check the kernel version (-k) and the base directory (-b)",
    )
