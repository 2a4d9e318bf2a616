"""Parity with kmod's modinfo on every module of a real Debian kernel package (docs/modinfo.md).

Prerequisite: scripts/fetch-kernel-modules.sh (writes .cache/artefacts/kernel/TREE). The whole tree is
compared in-process (one batched kmod call as the oracle); the real CLI runs on a sample; >= 100
modules are recompressed with xz, zstd (with and without a content size) and gzip. Debian 12's kmod
reads xz and zstd itself (`modinfo --version`: +ZSTD +XZ -ZLIB), so those compare directly; it has no
zlib, so gzip is compared against kmod's output for the uncompressed file with the filename adjusted.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.support import ARTEFACTS, require

from driver_container.formats.kmod import format_modinfo
from driver_container.readers.kmod import read_module

# The whole Debian module tree (thousands of modules, kmod as the oracle): up to 15 minutes on a slow runner.
pytestmark = [pytest.mark.artefact, pytest.mark.timeout(900)]

MODINFO = shutil.which("modinfo") or "/sbin/modinfo"


def _kmod(*args: str | Path) -> bytes:
    return subprocess.run([MODINFO, *map(str, args)], capture_output=True, check=True).stdout


def _ours(paths: list[Path], **options: object) -> bytes:
    return b"".join(format_modinfo(read_module(p), **options) for p in paths)  # type: ignore[arg-type]


def _first_difference(paths: list[Path], **options: object) -> str:
    flags = (["-F", str(options["field"])] if options.get("field") else []) + (["-0"] if options.get("null") else [])
    for path in paths:
        ours, theirs = _ours([path], **options), _kmod(*flags, path)
        if ours != theirs:
            return f"{path}:\nkmod: {theirs[:600]!r}\nours: {ours[:600]!r}"
    return "outputs differ only when concatenated"


@pytest.fixture(scope="module")
def modules() -> list[Path]:
    tree_file = ARTEFACTS / "kernel" / "TREE"
    require(tree_file.is_file(), "a real Debian kernel module tree", how="run scripts/fetch-kernel-modules.sh")
    require(Path(MODINFO).exists(), "kmod's modinfo", how="apt-get install kmod")
    found = sorted(Path(tree_file.read_text().strip()).rglob("*.ko"))
    assert len(found) > 1000, f"only {len(found)} modules under {tree_file.read_text().strip()}"
    return found


@pytest.fixture(scope="module")
def sample(modules: list[Path]) -> list[Path]:
    step = max(1, len(modules) // 110)
    picked = modules[::step]
    largest = sorted(modules, key=lambda p: p.stat().st_size)[-5:]  # multi-MB modules stress streaming
    return sorted(set(picked) | set(largest))


def test_every_module_equals_kmod(modules: list[Path]) -> None:
    ours, theirs = _ours(modules), _kmod(*modules)
    assert ours == theirs, _first_difference(modules)
    signed = sum(1 for p in modules if read_module(p).signature is not None)
    print(f"\nparity: {len(modules)} plain modules byte-identical to kmod ({signed} signed)")


@pytest.mark.parametrize(
    "options",
    [
        {"field": "parm"},
        {"field": "signer"},
        {"field": "alias"},
        {"null": True},
        {"field": "filename", "null": True},
        {"field": "sig_key"},
    ],
)
def test_every_module_equals_kmod_with_options(modules: list[Path], options: dict[str, object]) -> None:
    flags = (["-F", str(options["field"])] if "field" in options else []) + (["-0"] if options.get("null") else [])
    assert _ours(modules, **options) == _kmod(*flags, *modules), _first_difference(modules, **options)


def test_cli_on_a_sample(sample: list[Path]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "driver_container", "modinfo", *map(str, sample)], capture_output=True, check=False
    )
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert proc.stdout == _kmod(*sample)
    print(f"\nparity: CLI on {len(sample)} modules byte-identical to kmod")


def _compress(kind: str, source: Path, target: Path) -> None:
    argv = {
        "xz": ["xz", "--check=crc32", "--lzma2=dict=1MiB", "-T1", "-c"],  # the kernel's own xz flags
        "zstd": ["zstd", "-q", "-c", str(source)],
        "zstd-pipe": ["zstd", "-q", "-c"],  # from stdin: the frame header has no content size
    }[kind]
    with open(source, "rb") as stdin, open(target, "wb") as out:
        subprocess.run(argv, stdin=stdin, stdout=out, check=True)


@pytest.mark.parametrize("kind", ["xz", "zstd", "zstd-pipe"])
def test_recompressed_modules_equal_kmod(sample: list[Path], tmp_path: Path, kind: str) -> None:
    suffix = ".ko.xz" if kind == "xz" else ".ko.zst"
    packed = []
    for index, module in enumerate(sample):
        target = tmp_path / f"{index:04d}-{module.name.removesuffix('.ko')}{suffix}"
        _compress(kind, module, target)
        packed.append(target)
    if kind == "zstd-pipe":
        import zstandard

        assert zstandard.get_frame_parameters(packed[0].read_bytes()).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert _ours(packed) == _kmod(*packed), _first_difference(packed)
    assert {read_module(p).compression for p in packed} == {"xz" if kind == "xz" else "zstd"}
    print(f"\nparity: {len(packed)} modules recompressed with {kind} byte-identical to kmod")


def test_gzip_modules_equal_kmod_on_the_uncompressed_file(sample: list[Path], tmp_path: Path) -> None:
    count = 0
    for index, module in enumerate(sample):
        target = tmp_path / f"{index:04d}-{module.name}.gz"
        target.write_bytes(gzip.compress(module.read_bytes(), compresslevel=6, mtime=0))
        expected = _kmod(module).replace(
            f"filename:       {module}\n".encode(), f"filename:       {target}\n".encode(), 1
        )
        assert format_modinfo(read_module(target)) == expected, target
        count += 1
    assert count >= 100
    print(f"\nparity: {count} gzip modules equal kmod's output for the uncompressed file")


@pytest.mark.parametrize(("arch", "ident"), [("s390x", b"\x7fELF\x02\x02"), ("i386", b"\x7fELF\x01\x01")])
def test_foreign_architecture_trees_equal_kmod(arch: str, ident: bytes) -> None:
    # The other ELF layouts on real modules: s390x is ELF64 big-endian, i386 is ELF32 little-endian.
    tree_file = ARTEFACTS / "kernel" / f"TREE-{arch}"
    require(tree_file.is_file(), f"a real Debian {arch} kernel module tree", how="run scripts/fetch-kernel-modules.sh")
    require(Path(MODINFO).exists(), "kmod's modinfo", how="apt-get install kmod")
    found = sorted(Path(tree_file.read_text().strip()).rglob("*.ko"))
    assert len(found) > 1000
    assert {p.read_bytes()[:6] for p in found[::50]} == {ident}
    assert _ours(found) == _kmod(*found), _first_difference(found)
    print(f"\nparity: {len(found)} {arch} modules ({'ELF64 MSB' if ident[4] == 2 else 'ELF32 LSB'}) byte-identical")


@pytest.mark.parametrize(
    "arg",
    [
        "./modules/nvidia.ko",
        "modules//nvidia.ko",
        "./modules/./nvidia.ko.xz",
        "modules/../modules/nvidia.ko.zst",
        "FIXTURES//modules/nvidia.ko",
    ],
)
def test_filename_is_printed_as_given_like_kmod(arg: str) -> None:
    """``./`` and ``//`` were once normalised away; kmod keeps the argument's text."""
    from helpers.support import FIXTURES

    require(Path(MODINFO).exists(), "kmod's modinfo", how="apt-get install kmod")
    arg = arg.replace("FIXTURES", str(FIXTURES))
    argv = [sys.executable, "-m", "driver_container", "modinfo", "-F", "filename", arg]
    ours = subprocess.run(argv, capture_output=True, check=False, cwd=FIXTURES, timeout=60)
    theirs = subprocess.run([MODINFO, "-F", "filename", arg], capture_output=True, check=True, cwd=FIXTURES)
    assert (ours.returncode, ours.stderr) == (0, b"")
    assert ours.stdout == theirs.stdout
    full = subprocess.run([*argv[:4], arg], capture_output=True, check=False, cwd=FIXTURES, timeout=60)
    assert full.stdout == subprocess.run([MODINFO, arg], capture_output=True, check=True, cwd=FIXTURES).stdout
