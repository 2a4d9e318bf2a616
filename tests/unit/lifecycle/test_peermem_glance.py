"""The liveness probe's glance (lifecycle/peermem_glance.py) never contradicts the full probe, and the
probe command imports nothing but the glance's modules when the glance answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.support import NODE_FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from driver_container.base.paths import HOST_ROOTS, HostPaths
from driver_container.lifecycle.peermem import probe
from driver_container.lifecycle.peermem_glance import PROCFS_DEFAULT, PROCFS_ENV, passes_at_a_glance, procfs_root

REPO = Path(__file__).resolve().parents[3]
LINE = "{name} 16384 0 - Live 0x0000000000000000{taint}"


def test_glance_reads_the_root_paths_declares() -> None:
    (root,) = [r for r in HOST_ROOTS if r.env == PROCFS_ENV]
    assert str(getattr(HostPaths(), root.field)) == PROCFS_DEFAULT
    for value in ("", "/x/proc"):
        assert procfs_root({PROCFS_ENV: value}) == str(HostPaths.from_env({PROCFS_ENV: value}).procfs_root)


@pytest.mark.parametrize(
    ("scenario", "glance"),
    [("peermem-loaded", True), ("no-mellanox", True), ("peermem-missing", None), ("peermem-talos", None)],
)
def test_glance_answers_only_the_passing_cases(scenario: str, glance: bool | None) -> None:
    assert passes_at_a_glance(str(NODE_FIXTURES / scenario / "proc")) is glance


def test_glance_leaves_odd_files_to_the_full_probe(tmp_path: Path) -> None:
    assert passes_at_a_glance(str(tmp_path)) is None  # no modules file
    (tmp_path / "real").write_text(LINE.format(name="nvidia", taint="") + "\n")
    (tmp_path / "modules").symlink_to(tmp_path / "real")
    assert passes_at_a_glance(str(tmp_path)) is None  # a link is never followed
    (tmp_path / "modules").unlink()
    os.mkfifo(tmp_path / "modules")  # would block a plain open()
    assert passes_at_a_glance(str(tmp_path)) is None


_names = st.sampled_from(["mlx5_core", "nvidia_peermem", "nvidia", "mlx5-core", "nvidia_peermem2"])
_lines = st.one_of(
    st.builds(lambda n, t: LINE.format(name=n, taint=t), _names, st.sampled_from(["", " (OE)", " OE"])),
    st.builds(lambda n: f"{n} 1 0 - Gone 0x0", _names),  # a state the kernel never writes
    st.text(max_size=40),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_lines, max_size=6))
def test_glance_never_passes_what_the_full_probe_fails(lines: list[str]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "modules").write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
        glance = passes_at_a_glance(tmp)
        healthy, _reason = probe(HostPaths(procfs_root=Path(tmp)))
    assert glance in (True, None)
    if glance:
        assert healthy


@pytest.mark.parametrize("scenario", ["peermem-loaded", "no-mellanox"])
def test_probe_command_imports_only_the_glance(scenario: str) -> None:
    script = (
        "import sys\nsys.argv = ['nvidia-driver', 'probe_nvidia_peermem']\nfrom driver_container.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n"
        "    ours = sorted(m for m in sys.modules if m.startswith('driver_container'))\n"
        # re and pathlib are left out: the editable install's import hook (site) loads them in this venv.
        "    heavy = sorted({'dataclasses', 'logging', 'typing', 'typer'} & set(sys.modules))\n"
        "    print(e.code, ' '.join(ours), heavy)"
    )
    env = {**os.environ, "PROCFS_ROOT": str(NODE_FIXTURES / scenario / "proc")}
    done = subprocess.run(
        [sys.executable, "-I", "-c", script], env=env, capture_output=True, text=True, timeout=60, cwd=REPO, check=False
    )
    code, rest = done.stdout.strip().split(" ", 1)
    ours, heavy = rest.rsplit(" ", 1)
    assert code == "0", done.stdout + done.stderr
    assert heavy == "[]"
    assert set(ours.split()) == {
        "driver_container",
        "driver_container.cli",
        "driver_container.base",
        "driver_container.base.errors",
        "driver_container.base.fileread",
        "driver_container.formats",
        "driver_container.formats.kernel",
        "driver_container.formats.kernel.modules_line",
        "driver_container.formats.numbers",
        "driver_container.lifecycle",
        "driver_container.lifecycle.peermem_glance",
    }
