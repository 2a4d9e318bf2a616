"""``--version`` on both CLIs (the project's version and the image's driver version) and ``--log-format`` /
``LOG_FORMAT`` as a choice: a value other than ``human`` or ``json`` is a usage error (exit 2), never text logs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.support import REPO

from driver_container import __version__, project_version
from driver_container.cli import companion_cmd, main, manager_cmd

IMAGE = REPO / "tests/fixtures/manager/talos-not-loaded/image"  # usr/lib/x86_64-linux-gnu/libcuda.so.595.91.07
Entry = Callable[[list[str]], None]
ENTRIES: dict[str, Entry] = {"nvidia-driver": main, "driver-manager": manager_cmd.main}


def _run(entry: Entry, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        entry(argv)
        raise SystemExit(0)  # an entry that returns normally: exit 0
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out, captured.err


@pytest.fixture(autouse=True)
def temporary_run_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RUN_DIR", str(tmp_path / "run"))
    monkeypatch.delenv("LOG_FORMAT", raising=False)


def test_the_version_is_pyprojects() -> None:
    import tomllib

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert __version__ == project_version() == declared


@pytest.mark.parametrize("prog", ENTRIES)
def test_version_names_the_project_and_the_image_driver(
    prog: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("USERSPACE_ROOT", str(IMAGE))
    code, out, _ = _run(ENTRIES[prog], ["--version"], capsys)
    assert code == 0
    assert out.splitlines() == [f"{prog} {project_version()}", f"driver: 595.91.07 (NVIDIA userspace under {IMAGE})"]


@pytest.mark.parametrize("prog", ENTRIES)
def test_version_outside_an_image_says_so(
    prog: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("USERSPACE_ROOT", str(tmp_path))
    code, out, _ = _run(ENTRIES[prog], ["--version"], capsys)
    assert code == 0
    assert out.splitlines()[1] == f"driver: none (no NVIDIA userspace under {tmp_path}: not inside the driver image)"


@pytest.mark.parametrize("prog", ENTRIES)
@pytest.mark.parametrize("value", ["JSON", "jsn", "text", ""])
def test_a_log_format_outside_the_choice_is_a_usage_error(
    prog: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    command = "status" if prog == "nvidia-driver" else "preflight_check"
    code, _, err = _run(ENTRIES[prog], ["--log-format", value, command], capsys)
    assert code == 2
    assert "Invalid value for '--log-format'" in err and "'human', 'json'" in err


@pytest.mark.parametrize("prog", ENTRIES)
def test_a_log_format_variable_outside_the_choice_is_a_usage_error(
    prog: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOG_FORMAT", "JSON")
    command = "status" if prog == "nvidia-driver" else "preflight_check"
    code, _, err = _run(ENTRIES[prog], [command], capsys)
    assert code == 2
    assert "LOG_FORMAT" in err


def test_the_companions_refuse_a_log_format_outside_the_choice(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOG_FORMAT", "Json")
    code, _, err = _run(companion_cmd.gds_main, ["install"], capsys)
    assert code == 2
    assert err == "nvidia-gds-driver: error: LOG_FORMAT='Json': not one of human, json\n"
