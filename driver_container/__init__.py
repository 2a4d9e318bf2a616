"""NVIDIA driver-container entrypoint for Talos Linux.

The project's version has one source, pyproject.toml's ``version``, read from the installed distribution's
metadata (the image installs the wheel): ``driver_container.__version__``. It is computed on first use
(PEP 562 ``__getattr__``): importlib.metadata costs milliseconds, and the liveness probe's fast path imports
this package without ever needing the version (bench/startup.py)."""

from __future__ import annotations

DISTRIBUTION = "talos-nvidia-driver-container"  # pyproject.toml [project] name
# A source tree that was never installed (no metadata): a PEP 440 local version that says so.
UNKNOWN_VERSION = "0+unknown"


def project_version() -> str:
    """pyproject.toml's ``version`` as installed (the distribution's metadata)."""
    import importlib.metadata  # lazy, hot path: see the module docstring

    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN_VERSION


def __getattr__(name: str) -> str:
    if name == "__version__":
        return project_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
