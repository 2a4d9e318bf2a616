"""elfdeps on the gcc-built objects of the synthetic userspace (facts cross-checked with `readelf -d -l`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.support import FIXTURES, require

from driver_container.formats.elfdeps import ElfDeps, ElfFormatError
from driver_container.publish.sources import ElfFacts
from driver_container.readers.elf import read_elf_deps

TREE = FIXTURES / "userspace" / "debian-595.91.07"
LIB = TREE / "usr/lib/x86_64-linux-gnu"
CUDA = LIB / "nvidia/current/libcuda.so.595.91.07"


@pytest.fixture(autouse=True)
def _tree() -> None:
    require(TREE.is_dir(), "synthetic userspace", how="tests/fixtures/userspace/build.sh")


def test_shared_library_soname_and_needed() -> None:
    deps = read_elf_deps(CUDA)
    assert deps == ElfDeps("EM_X86_64", 64, "ET_DYN", None, "libcuda.so.1", ("libnvidia-glcore.so.595.91.07",))


def test_executable_interpreter_and_needed() -> None:
    deps = read_elf_deps(TREE / "usr/lib/nvidia/current/nvidia-smi")
    assert (deps.elf_type, deps.interpreter, deps.soname) == ("ET_EXEC", "/lib64/ld-linux-x86-64.so.2", None)
    assert deps.needed == ("libnvidia-ml.so.1",)
    assert not deps.is_static


def test_loader_itself_has_no_interpreter() -> None:
    deps = read_elf_deps(LIB / "ld-linux-x86-64.so.2")
    assert (deps.soname, deps.needed, deps.is_static) == ("ld-linux-x86-64.so.2", (), True)


def test_bytes_and_path_agree() -> None:
    assert read_elf_deps(CUDA.read_bytes()) == read_elf_deps(CUDA)


def test_final_symlink_is_not_followed() -> None:
    with pytest.raises(ElfFormatError, match="cannot open"):
        read_elf_deps(LIB / "libfixturedep.so.2")  # a link: opened with O_NOFOLLOW


def test_non_elf_file(tmp_path: Path) -> None:
    fake = tmp_path / "libnvidia-fake.so.595.91.07"
    fake.write_text("INPUT(-lfoo)\n")  # a linker script named like a library
    with pytest.raises(ElfFormatError, match=r"libnvidia-fake\.so\.595\.91\.07: not an ELF file") as info:
        read_elf_deps(fake)
    assert info.value.fix


@pytest.mark.parametrize("keep", [4, 16, 64, 200])
def test_truncated_elf(keep: int) -> None:
    with pytest.raises(ElfFormatError, match="malformed ELF file"):
        read_elf_deps(CUDA.read_bytes()[:keep], name="cut")


def test_recorded_facts_are_reused_without_reading(tmp_path: Path) -> None:
    """Same (path, size, mtime): the recorded facts are returned and the file is not parsed at all."""
    lib = tmp_path / "lib.so.1"
    lib.write_text("not an ELF file; parsing it would fail\n")
    st = lib.stat()
    recorded = read_elf_deps(CUDA)
    facts = ElfFacts({(str(lib), st.st_size, st.st_mtime_ns): recorded})
    assert facts.get(lib, "lib", st.st_size, st.st_mtime_ns) == recorded
    assert (facts.read, facts.reused) == (0, 1)


def test_changed_file_is_read_again(tmp_path: Path) -> None:
    lib = tmp_path / "lib.so.1"
    lib.write_text("not an ELF file\n")
    st = lib.stat()
    facts = ElfFacts({(str(lib), st.st_size, st.st_mtime_ns - 1): read_elf_deps(CUDA)})
    with pytest.raises(ElfFormatError, match="not an ELF file"):
        facts.get(lib, "lib", st.st_size, st.st_mtime_ns)
    assert facts.read == 1
