"""driverroot/proof.py: the proof made before Ready and by ``status``, on real mounts (helpers/mounts.py),
because what it proves is what the kernel enforces: exec(2) and mmap(PROT_EXEC) on noexec, nodev."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
from helpers.mounts import tmpfs
from helpers.support import require

from driver_container.driverroot.proof import PROOF_ARGS, PROOF_BINARY, prove_root_usable
from driver_container.runtime.runner import Runner

LIBDIR = "usr/lib/x86_64-linux-gnu"


class RecordingRunner(Runner):
    """The real runner, keeping every argv it was asked to run."""

    def __init__(self) -> None:
        super().__init__()
        self.argvs: list[list[str]] = []

    def exit_status(self, argv: Sequence[str], *, timeout: float = 120.0) -> int:
        self.argvs.append(list(argv))
        return super().exit_status(argv, timeout=timeout)


def _publish_like(root: Path) -> Path:
    """What every published root has for the proof: a static ldconfig, and NVML behind its SONAME link."""
    ldconfig = Path(shutil.which("ldconfig.real") or shutil.which("ldconfig") or "/sbin/ldconfig")
    require(ldconfig.is_file(), "a static ldconfig (libc-bin)")
    (root / "sbin").mkdir(parents=True)
    shutil.copy2(ldconfig, root / PROOF_BINARY)
    (root / LIBDIR).mkdir(parents=True)
    shutil.copy2(ldconfig, root / LIBDIR / "libnvidia-ml.so.535.309.01")  # any ELF maps like a library
    (root / LIBDIR / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.535.309.01")
    return root


def test_an_exec_capable_root_passes_and_the_binary_really_ran(tmp_path: Path) -> None:
    root = _publish_like(tmp_path / "driver")
    runner = RecordingRunner()
    proof = prove_root_usable(root, runner)
    assert proof.ok, proof.failures
    assert runner.argvs == [[str(root / PROOF_BINARY), *PROOF_ARGS]]
    assert not proof.flags.noexec and not proof.flags.nodev and proof.flags.path == str(root)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("noexec,nosuid,nodev", ("executing", "mapping", "nodev")),  # Talos's /run
        ("noexec,nosuid", ("executing", "mapping")),
        ("nosuid,nodev", ("nodev",)),
    ],
)
def test_each_flag_the_kernel_enforces_is_a_failure(tmp_path: Path, options: str, expected: tuple[str, ...]) -> None:
    with tmpfs(tmp_path / "run", options):
        root = _publish_like(tmp_path / "run/driver")
        proof = prove_root_usable(root, Runner())
    assert not proof.ok
    kinds = tuple(next(k for k in ("executing", "mapping", "nodev") if k in f) for f in proof.failures)
    assert kinds == expected
    text = "; ".join(proof.failures)
    if "executing" in expected:
        assert "Permission denied" in text  # execve: EACCES
        assert "mmap PROT_EXEC): Operation not permitted" in text  # mmap: EPERM
    assert proof.flags.noexec == ("noexec" in options) and proof.flags.nodev == ("nodev" in options)


def test_a_root_without_the_binary_or_the_library_fails(tmp_path: Path) -> None:
    root = _publish_like(tmp_path / "driver")
    (root / PROOF_BINARY).unlink()
    (root / LIBDIR / "libnvidia-ml.so.1").unlink()
    proof = prove_root_usable(root, RecordingRunner())
    assert [f.split(" is not")[0].split(" of ")[0] for f in proof.failures] == [str(PROOF_BINARY), "none"]


def test_links_leading_out_of_the_root_are_resolved_inside_it(tmp_path: Path) -> None:
    # A hostile root: both point at real, executable files of this machine; inside the root they are not there.
    root = _publish_like(tmp_path / "driver")
    (root / PROOF_BINARY).unlink()
    (root / PROOF_BINARY).symlink_to("/bin/true")
    (root / LIBDIR / "libnvidia-ml.so.1").unlink()
    (root / LIBDIR / "libnvidia-ml.so.1").symlink_to("/lib/x86_64-linux-gnu/libc.so.6")
    runner = RecordingRunner()
    proof = prove_root_usable(root, runner)
    assert len(proof.failures) == 2 and runner.argvs == []


def test_libcuda_serves_when_nvml_is_not_published(tmp_path: Path) -> None:
    root = _publish_like(tmp_path / "driver")
    (root / LIBDIR / "libnvidia-ml.so.1").rename(root / LIBDIR / "libcuda.so.1")
    assert prove_root_usable(root, Runner()).ok
