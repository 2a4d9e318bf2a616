"""plan_publish (pure): a described userspace in, the canonical layout out. No file is touched."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from driver_container.base.errors import UserspaceError
from driver_container.formats.elfdeps import ElfDeps
from driver_container.publish.model import PlannedEntry, PublishSources, SourceFile
from driver_container.publish.plan import plan_publish, relative_target, safe_mode

V = "535.309.01"
T = "x86_64-linux-gnu"
INTERP = "/lib64/ld-linux-x86-64.so.2"
U = Path("/userspace")  # never opened: the planner only carries paths


def elf(soname: str | None, *needed: str, interp: str | None = None) -> ElfDeps:
    return ElfDeps("EM_X86_64", 64, "ET_EXEC" if interp else "ET_DYN", interp, soname, needed)


def src(inner: str, mode: int = 0o644, facts: ElfDeps | None = None) -> SourceFile:
    return SourceFile(U / inner, f"USERSPACE_ROOT/{inner}", 100, 1, mode, facts)


LOADER = src(f"usr/lib/{T}/ld-linux-x86-64.so.2", 0o755, elf("ld-linux-x86-64.so.2"))
CUDA = src(f"usr/lib/{T}/nvidia/current/libcuda.so.{V}", facts=elf("libcuda.so.1", "libc.so.6"))
GLCORE = src(f"usr/lib/{T}/nvidia/current/libnvidia-glcore.so.{V}", facts=elf(f"libnvidia-glcore.so.{V}"))
LIBC = src(f"usr/lib/{T}/libc.so.6", 0o755, elf("libc.so.6"))
SMI = src("usr/lib/nvidia/current/nvidia-smi", 0o4755, elf(None, "libc.so.6", interp=INTERP))
FIRMWARE = src(f"usr/lib/firmware/nvidia/{V}/gsp_ga10x.bin", 0o664)
ICD = src("etc/vulkan/icd.d/nvidia_icd.json", 0o666)
LDCONFIG = src("sbin/ldconfig.real", 0o755, elf(None))


def space(**changes: object) -> PublishSources:
    base: dict[str, object] = {
        "version": V,
        "triplet": T,
        "libraries": ((f"libcuda.so.{V}", CUDA), (f"libnvidia-glcore.so.{V}", GLCORE)),
        "binaries": (("nvidia-smi", SMI),),
        "firmware": (("gsp_ga10x.bin", FIRMWARE),),
        "configs": ((PurePosixPath("etc/vulkan/icd.d/nvidia_icd.json"), ICD),),
        "dependencies": (("libc.so.6", LIBC),),
        "interpreter": (PurePosixPath(INTERP), LOADER),
        "ldconfig": LDCONFIG,
    }
    return PublishSources(**{**base, **changes})  # type: ignore[arg-type]


def by_path(entries: tuple[PlannedEntry, ...]) -> dict[str, PlannedEntry]:
    return {str(e.path): e for e in entries}


def test_canonical_layout() -> None:
    plan = plan_publish(space())
    entries = by_path(plan.entries)
    lib = f"usr/lib/{T}"
    files = {p: e.source.real for p, e in entries.items() if e.kind == "file" and e.source}
    assert files == {
        "lib64/ld-linux-x86-64.so.2": LOADER.real,
        f"{lib}/libcuda.so.{V}": CUDA.real,
        f"{lib}/libnvidia-glcore.so.{V}": GLCORE.real,
        f"{lib}/libc.so.6": LIBC.real,
        "usr/bin/nvidia-smi": SMI.real,
        f"lib/firmware/nvidia/{V}/gsp_ga10x.bin": FIRMWARE.real,
        "etc/vulkan/icd.d/nvidia_icd.json": ICD.real,
        "sbin/ldconfig.real": LDCONFIG.real,
    }
    links = {p: e.target for p, e in entries.items() if e.kind == "link"}
    assert links == {f"{lib}/libcuda.so.1": f"libcuda.so.{V}", "sbin/ldconfig": "ldconfig.real"}
    conf = entries["etc/ld.so.conf"]
    assert conf.kind == "text" and conf.data is not None and conf.data.decode().splitlines()[-1] == f"/{lib}"
    assert [str(e.path) for e in plan.entries] == sorted(str(e.path) for e in plan.entries)


def test_sonames_map_to_published_files() -> None:
    plan = plan_publish(space())
    lib = PurePosixPath("usr/lib") / T
    assert plan.sonames == {
        "libcuda.so.1": lib / f"libcuda.so.{V}",
        f"libnvidia-glcore.so.{V}": lib / f"libnvidia-glcore.so.{V}",
        "libc.so.6": lib / "libc.so.6",
    }
    assert plan.nvidia_sonames == {"libcuda.so.1", f"libnvidia-glcore.so.{V}"}


def test_modes_drop_setuid_and_group_world_write() -> None:
    entries = by_path(plan_publish(space()).entries)
    assert entries["usr/bin/nvidia-smi"].mode == 0o755  # was 4755
    assert entries[f"lib/firmware/nvidia/{V}/gsp_ga10x.bin"].mode == 0o644  # was 664
    assert entries["etc/vulkan/icd.d/nvidia_icd.json"].mode == 0o644  # was 666
    assert safe_mode(0o6777, executable=False) == 0o755
    assert safe_mode(0o600, executable=False) == 0o644
    assert safe_mode(0o700, executable=True) == 0o755


def test_same_source_twice_becomes_a_link() -> None:
    """The interpreter is also the DT_NEEDED ld-linux-x86-64.so.2: one copy, one relative link."""
    plan = plan_publish(space(dependencies=(("libc.so.6", LIBC), ("ld-linux-x86-64.so.2", LOADER))))
    entries = by_path(plan.entries)
    link = entries[f"usr/lib/{T}/ld-linux-x86-64.so.2"]
    assert (link.kind, link.target) == ("link", "../../../lib64/ld-linux-x86-64.so.2")
    assert sum(1 for e in plan.entries if e.source == LOADER) == 1


def test_two_files_at_one_path_is_an_error() -> None:
    other = src(f"opt/{T}/libcuda.so.{V}", facts=elf("libcuda.so.1"))
    with pytest.raises(UserspaceError, match=rf"two different files would be published at usr/lib/{T}/libcuda"):
        plan_publish(space(libraries=((f"libcuda.so.{V}", CUDA),), dependencies=((f"libcuda.so.{V}", other),)))


def test_no_interpreter_for_static_only_userspace() -> None:
    entries = by_path(plan_publish(space(interpreter=None)).entries)
    assert "lib64/ld-linux-x86-64.so.2" not in entries


@pytest.mark.parametrize(
    ("link", "dest", "target"),
    [
        ("usr/lib/x/libcuda.so.1", "usr/lib/x/libcuda.so.9", "libcuda.so.9"),
        ("sbin/ldconfig", "sbin/ldconfig.real", "ldconfig.real"),
        ("usr/lib/x/ld.so", "lib64/ld.so", "../../../lib64/ld.so"),
    ],
)
def test_relative_target(link: str, dest: str, target: str) -> None:
    assert relative_target(PurePosixPath(link), PurePosixPath(dest)) == target


def test_relative_target_never_leaves_the_root() -> None:
    with pytest.raises(UserspaceError, match="would leave the driver root"):
        relative_target(PurePosixPath("usr/lib/a"), PurePosixPath("../outside"))


BUSYBOX = src("usr/bin/busybox", 0o755, elf(None))


def test_a_static_shell_is_published_as_bin_sh_with_empty_dev_shm_proc_and_sys() -> None:
    # The DRA driver's MPS daemon chroots only through <root>/bin/sh, and its kubelet plugin mounts the
    # claim's shm at <root>/dev/shm only when that exists (formats/userspace_layout.py ROOT_SHELL, ROOT_SHM);
    # init mounts a procfs and a sysfs at proc and sys (driverroot/procsys.py).
    entries = by_path(plan_publish(space(shell=BUSYBOX)).entries)
    assert entries["bin/sh"] == PlannedEntry(PurePosixPath("bin/sh"), "file", 0o755, source=BUSYBOX)
    for directory in ("dev/shm", "proc", "sys"):
        assert entries[directory] == PlannedEntry(PurePosixPath(directory), "dir", 0o755)
    without = by_path(plan_publish(space()).entries)
    assert not any(str(p).startswith(("bin/", "dev/")) or str(p) in ("proc", "sys") for p in without)
