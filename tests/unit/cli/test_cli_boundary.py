"""Any unexpected exception becomes one line on stderr and exit 1; the traceback only with --verbose.

``init`` keeps a copy of its log in RUN_DIR before anything else: every run here gets a temporary RUN_DIR
(the default is the machine's /run/nvidia)."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver_container.cli import main, manager_cmd
from driver_container.lifecycle import init as lifecycle
from driver_container.manager import manager


def _boom(*_args: object, **_kwargs: object) -> None:
    raise RuntimeError("unexpected\nsecond line")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str], entry: object = main) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        entry(argv)  # type: ignore[operator]
    return int(exited.value.code or 0), capsys.readouterr().err


@pytest.fixture(autouse=True)
def temporary_run_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    monkeypatch.setenv("RUN_DIR", str(run_dir))
    return run_dir


def test_unexpected_error_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], temporary_run_dir: Path
) -> None:
    monkeypatch.setattr(lifecycle, "run_init", _boom)
    code, err = _run(["init", "--no-wait"], capsys)
    assert code == 1
    assert "Traceback" not in err
    assert "nvidia-driver: error: internal error: RuntimeError: unexpected\n" in err
    assert "second line" not in err
    assert (temporary_run_dir / "nvidia-driver.log").is_file()  # the copy of the log went to RUN_DIR


def test_verbose_shows_the_traceback(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(lifecycle, "run_init", _boom)
    code, err = _run(["--verbose", "init", "--no-wait"], capsys)
    assert code == 1
    assert "Traceback" in err and "RuntimeError: unexpected" in err


def test_driver_manager_has_the_same_boundary(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(manager, "run_uninstall", _boom)
    monkeypatch.setenv("NODE_NAME", "node-1")
    monkeypatch.setenv("OPERATOR_NAMESPACE", "gpu-operator")
    code, err = _run(["uninstall_driver"], capsys, manager_cmd.main)
    assert code == 1
    assert "Traceback" not in err and "driver-manager: error: internal error: RuntimeError: unexpected" in err
