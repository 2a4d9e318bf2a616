"""The benchmark scripts of bench/ as modules, for the tests that check how they parse and print.

bench/ is a directory of scripts, not a package, and a test must not put it on sys.path: each script is
loaded from its file under the module name ``bench_<name>``, once per session.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from types import ModuleType

from helpers.support import REPO

BENCH = REPO / "bench"


@functools.cache
def bench_script(name: str) -> ModuleType:
    """bench/<name>.py, executed as a module (its ``main`` is not run)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    # A dataclass looks its module up in sys.modules while the class is created.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
