"""Module parameters for ``modprobe``: the operator's ``/drivers/<module>.conf`` files and NVIDIA's rules.

The operator mounts its ``kernelModuleConfig`` ConfigMap keys as ``/drivers/nvidia.conf``,
``nvidia-uvm.conf``, ``nvidia-modeset.conf`` and ``nvidia-peermem.conf``; each line holds one or more
``NAME=VALUE`` parameters (gpu-operator assets/state-driver). NVIDIA's scripts add
``NVreg_CoherentGPUMemoryMode=driver`` for R580 and later (needed on GH200/GB200) unless it is given.

Pure functions only: text and values in, values out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from driver_container.base.errors import HostReadError, UsageError
from driver_container.formats.numbers import parse_uint

_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
COHERENT_MEMORY_PARAM = "NVreg_CoherentGPUMemoryMode"
COHERENT_MEMORY_VALUE = "driver"
COHERENT_MEMORY_FIRST_MAJOR = 580  # NVIDIA adds the parameter from R580 on


def conf_module_name(file_stem: str) -> str:
    """``nvidia-uvm`` (the operator's ConfigMap key) -> ``nvidia_uvm`` (the kernel's name)."""
    return file_stem.replace("-", "_")


def parse_module_conf(text: str, *, source: str = "<conf>") -> list[tuple[str, str]]:
    """Ordered ``NAME=VALUE`` pairs of a ``/drivers/<module>.conf`` file, duplicates kept (the kernel
    applies the last one): one or more per line, shell quoting allowed as NVIDIA's scripts pass the line to
    modprobe through the shell; ``#`` starts a comment. The one parser of these files: `status`/`init`'s
    inspection and generic hosts' modprobe read them through it.

    Raises HostReadError naming ``source`` and the line when a word is not ``NAME=VALUE``.
    """
    pairs: list[tuple[str, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            words = shell_words(line)
        except ValueError as exc:
            raise HostReadError(
                f"{source}:{number}: cannot parse {line.strip()[:80]!r}: {exc}",
                path=source,
                line=number,
                fix="write NAME=VALUE pairs, quote values that contain spaces",
            ) from exc
        for word in words:
            name, sep, value = word.partition("=")
            if not sep or not _PARAM.fullmatch(name):
                raise HostReadError(
                    f"{source}:{number}: {word[:80]!r} is not NAME=VALUE",
                    path=source,
                    line=number,
                    fix="write module parameters as NAME=VALUE, e.g. NVreg_EnableGpuFirmware=1",
                )
            pairs.append((name, value))
    return pairs


# What shlex treats specially in POSIX mode with whitespace_split (Lib/shlex.py: quotes, escape,
# commentors); a line without any of them is split on shlex's whitespace alone.
_SHELL_SYNTAX = frozenset("'\"\\#")


def shell_words(line: str) -> list[str]:
    """``shlex.split(line, comments=True)`` for one line (no newline in it); plain ``NAME=VALUE`` lines, the
    operator's usual content, are split without importing shlex (~1 ms of a start, bench/startup.py)."""
    if _SHELL_SYNTAX.isdisjoint(line):
        # shlex's whitespace is " \t\r\n" only: str.split() would also split on \x0b, \x1c, \xa0...
        return [w for w in line.replace("\t", " ").replace("\r", " ").replace("\n", " ").split(" ") if w]
    import shlex  # lazy, hot path: quoting, escapes and comments only

    return shlex.split(line, comments=True)


def conf_file_name(module: str) -> str:
    """``nvidia_uvm`` or ``nvidia-uvm`` -> ``nvidia-uvm.conf`` (the ConfigMap keys use dashes)."""
    return module.replace("_", "-") + ".conf"


def _same_param(a: str, b: str) -> bool:
    # The kernel compares parameter names treating '-' and '_' as equal (kernel/params.c parameq).
    return a.replace("-", "_") == b.replace("-", "_")


def has_parameter(params: Sequence[tuple[str, str]], name: str) -> bool:
    return any(_same_param(given, name) for given, _value in params)


def driver_major(version: str) -> int:
    """``580.105.08`` -> 580. Raises UsageError for anything that is not MAJOR.MINOR[.PATCH] digits."""
    parts = version.strip().split(".")
    numbers = [parse_uint(p) for p in parts]
    if len(parts) not in (2, 3) or None in numbers:
        raise UsageError(
            f"driver version {version!r}: expected MAJOR.MINOR[.PATCH], e.g. 595.91.07",
            name="DRIVER_VERSION",
            value=version,
            fix="set DRIVER_VERSION to the version of the modules in the image",
        )
    return numbers[0]  # type: ignore[return-value]


def nvidia_parameters(params: Sequence[tuple[str, str]], driver_version: str | None) -> list[tuple[str, str]]:
    """The parameters for ``nvidia`` itself: the operator's, then NVIDIA's R580+ coherent-memory default
    when the operator did not set it. Without a known version nothing is added."""
    result = list(params)
    if (
        driver_version is not None
        and driver_major(driver_version) >= COHERENT_MEMORY_FIRST_MAJOR
        and not has_parameter(result, COHERENT_MEMORY_PARAM)
    ):
        result.append((COHERENT_MEMORY_PARAM, COHERENT_MEMORY_VALUE))
    return result
