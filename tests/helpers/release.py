"""scripts/release-matrix.py and the archive scripts as modules (scripts/ is not a package), loaded once per
session."""

from __future__ import annotations

import functools
import importlib.util
import sys
from types import ModuleType

from helpers.support import REPO


def _script(name: str, file: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@functools.cache
def release_matrix() -> ModuleType:
    return _script("release_matrix", "release-matrix.py")


@functools.cache
def archive_layout() -> ModuleType:
    """scripts/nvidia-archive-layout.py: the Dockerfile's archive route lays NVIDIA's archive out with it."""
    return _script("nvidia_archive_layout", "nvidia-archive-layout.py")


@functools.cache
def archive_maker() -> ModuleType:
    """scripts/make-nvidia-archive.py: a driver archive in NVIDIA's layout made of Debian's files."""
    return _script("make_nvidia_archive", "make-nvidia-archive.py")
