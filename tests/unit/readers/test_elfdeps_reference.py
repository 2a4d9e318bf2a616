"""elfdeps reads DT_* strings itself (fast path); pyelftools' full DynamicSegment parse is the reference."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.support import ARTEFACTS, FIXTURES, require

from driver_container.readers.elf import read_elf_deps


def _reference(path: Path) -> tuple[str | None, str | None, tuple[str, ...], tuple[str, ...]]:
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as stream:
        elf = ELFFile(stream)
        interp = soname = None
        needed: list[str] = []
        runpath: list[str] = []
        for segment in elf.iter_segments():
            if segment["p_type"] == "PT_INTERP":
                interp = segment.get_interp_name()
            elif segment["p_type"] == "PT_DYNAMIC":
                for tag in segment.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif tag.entry.d_tag == "DT_SONAME":
                        soname = tag.soname
                    elif tag.entry.d_tag in ("DT_RUNPATH", "DT_RPATH"):
                        value = tag.runpath if tag.entry.d_tag == "DT_RUNPATH" else tag.rpath
                        runpath.extend(p for p in value.split(":") if p)
        return interp, soname, tuple(needed), tuple(runpath)


def _elf_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and p.read_bytes()[:4] == b"\x7fELF")


def _compare(files: list[Path]) -> None:
    assert files
    for path in files:
        deps = read_elf_deps(path)
        assert (deps.interpreter, deps.soname, deps.needed, deps.runpath) == _reference(path), path


def test_fixture_userspace_matches_pyelftools() -> None:
    _compare(_elf_files(FIXTURES / "userspace" / "debian-595.91.07"))


@pytest.mark.artefact
def test_real_nvidia_535_userspace_matches_pyelftools() -> None:
    root = ARTEFACTS / "debian-nvidia-535"
    require((root / ".complete").is_file(), "Debian NVIDIA 535 chroot", how="scripts/make-nvidia-userspace.sh")
    files = [p for p in _elf_files(root / "usr/lib/x86_64-linux-gnu/nvidia/current")]
    files += [p for p in _elf_files(root / "usr/bin") if "nvidia" in p.name]
    assert len(files) >= 8
    _compare(files)
