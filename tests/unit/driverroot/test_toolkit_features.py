"""toolkit_features (pure): what ``status`` lists under "not in the image" (docs/status.md)."""

from __future__ import annotations

from driver_container.driverroot.toolkit_features import TOOLKIT_FEATURES, absent_features

T = "x86_64-linux-gnu"
DEBIAN_535 = ["usr/bin/nvidia-smi", f"usr/lib/{T}/libcuda.so.535.309.01"]
RUN_580 = [*DEBIAN_535, "usr/bin/nvidia-imex", "usr/bin/nvidia-imex-ctl", "usr/bin/nvidia-debugdump", "bin/sh"]


def _names(paths: list[str], version: str) -> list[str]:
    return [f.name for f in absent_features(paths, version)]


def test_what_debians_root_lacks() -> None:
    assert _names(DEBIAN_535, "535.309.01") == ["nvidia-imex", "nvidia-imex-ctl", "sh", "nvidia-debugdump"]


def test_a_root_with_its_static_shell_lacks_no_shell() -> None:
    # bin/sh is what the DRA driver's MPS control daemon checks before it chroots (publish/static_tools.py).
    assert "sh" not in _names([*DEBIAN_535, "bin/sh"], "535.309.01")
    assert "sh" in _names([*DEBIAN_535, "usr/bin/nvidia-smi"], "535.309.01")


def test_nvvm70_is_expected_from_r575_on() -> None:
    assert _names(RUN_580, "570.195.03") == []  # before R575 no driver has it
    assert _names(RUN_580, "580.95.05") == ["libnvidia-nvvm70"]
    assert _names([*RUN_580, f"usr/lib/{T}/libnvidia-nvvm70.so.4"], "580.95.05") == []


def test_names_are_matched_whole() -> None:
    # nvidia-imex-ctl alone does not stand for nvidia-imex, nor a directory named like a binary for the binary.
    assert "nvidia-imex" in _names([*DEBIAN_535, "usr/bin/nvidia-imex-ctl"], "535.309.01")
    assert _names(DEBIAN_535, "not-a-version") == _names(DEBIAN_535, "535.309.01")
    assert all(f.loses and f.name for f in TOOLKIT_FEATURES)
