"""scripts/release-matrix.py as a module (scripts/ is not a package), loaded once per session."""

from __future__ import annotations

import functools
import importlib.util
import sys
from types import ModuleType

from helpers.support import REPO


@functools.cache
def release_matrix() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release_matrix", REPO / "scripts" / "release-matrix.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["release_matrix"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
