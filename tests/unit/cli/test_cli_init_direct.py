"""``nvidia-driver init`` as the DaemonSet runs it goes around typer (cli/init_entry.py): the same run as
typer's ``init`` command for every environment, read by the one configuration reader (settings/resolve.py);
a value that reader refuses is typer's usage error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from driver_container.cli import init_entry, main
from driver_container.lifecycle import init as lifecycle_init


def _captured_run(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> tuple[Any, ...]:
    """What ``init`` hands to the lifecycle for ``argv`` (the run itself replaced), and whether typer ran."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(lifecycle_init, "run_init_reporting_refusal", lambda *a: calls.append(a[:2] + a[3:]))
    try:
        main(argv)
    except SystemExit as exited:  # typer's standalone mode ends with sys.exit(0)
        assert exited.code in (0, None)
    assert len(calls) == 1
    return calls[0]


@pytest.fixture
def pod_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("RUN_DIR", str(tmp_path / "run"))
    for name in ("LOG_FORMAT", "VERBOSE", "NVIDIA_PERSISTENCED_RUNTIME_DIR", "DRIVER_ROOT", "HOST_ROOT_MOUNT"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"VERBOSE": "true", "LOG_FORMAT": "json"},
        {"VERBOSE": "0", "LOG_FORMAT": ""},
        {"NVIDIA_PERSISTENCED_RUNTIME_DIR": "/tmp/pd", "HOST_ROOT_MOUNT": "/h", "DRIVER_ROOT": "/r/driver"},
    ],
)
@pytest.mark.parametrize("no_wait", [False, True])
def test_the_direct_init_runs_what_typers_init_runs(
    pod_env: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], no_wait: bool
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    command = ["init", "--no-wait"] if no_wait else ["init"]
    direct = _captured_run(monkeypatch, command)
    # A global option on the command line is not the DaemonSet's: typer parses it.
    through_typer = _captured_run(monkeypatch, ["--run-dir", str(pod_env / "run"), *command])
    assert direct == through_typer
    assert direct[2].no_wait is no_wait


def test_the_direct_init_imports_no_typer(pod_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shown in this process by what typer's module table holds after the direct run: no ``init`` command
    was registered (the typer app would have been imported to register it)."""
    import sys

    monkeypatch.delitem(sys.modules, "driver_container.cli.init_cmd", raising=False)
    _captured_run(monkeypatch, ["init"])
    assert "driver_container.cli.init_cmd" not in sys.modules


@pytest.mark.parametrize(("name", "value"), [("VERBOSE", "maybe"), ("LOG_FORMAT", "JSON"), ("LOG_FORMAT", "text")])
def test_a_value_the_reader_refuses_goes_to_typer(name: str, value: str) -> None:
    assert init_entry.run_direct(["init"], {name: value}) is False


@pytest.mark.parametrize(
    "args", [["init", "--accept-license"], ["init", "-m", "4"], ["--verbose", "init"], ["init", "--help"], ["status"]]
)
def test_any_other_command_line_goes_to_typer(args: list[str]) -> None:
    assert init_entry.run_direct(args, {}) is False


@pytest.mark.parametrize(("name", "value"), [("LOG_FORMAT", "JSON"), ("VERBOSE", "maybe")])
def test_a_bad_value_on_the_direct_command_line_is_typers_usage_error(
    pod_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exited:
        main(["init"])
    assert exited.value.code == 2
    assert name in capsys.readouterr().err
