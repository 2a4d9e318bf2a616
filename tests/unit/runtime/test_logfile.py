"""init's copy of its log in RUN_DIR (runtime/logfile.py): capped and rotated once, contained in RUN_DIR,
and never a reason for init to fail."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver_container.runtime.logfile import LOG_FILE, ROTATED_LOG_FILE, RunDirLog, keep_log

log = logging.getLogger("test.logfile")


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    root.setLevel(logging.INFO)
    yield root
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:], root.level = handlers, level


def test_lines_are_kept_and_rotated_once_within_twice_the_cap(tmp_path: Path, root_logger: logging.Logger) -> None:
    handler = keep_log(tmp_path / "run", cap=1000)
    assert handler is not None and handler.active
    for i in range(200):
        log.info("line %03d of the publish", i)
    run = tmp_path / "run"
    assert sorted(os.listdir(run)) == [LOG_FILE, ROTATED_LOG_FILE]
    current, rotated = (run / LOG_FILE).read_text(), (run / ROTATED_LOG_FILE).read_text()
    assert len(current) <= 1000 and len(rotated) <= 1000
    assert "line 199 of the publish" in current.splitlines()[-1]
    assert " INFO    line " in rotated  # the file format: date, level, message


def test_a_second_writer_that_rotated_first_is_followed_not_rotated_away(tmp_path: Path) -> None:
    """init's forked children write through the same descriptor; a restart opens its own: whoever rotates
    first, the other reopens the new file instead of rotating it over the old one."""
    first, second = RunDirLog(tmp_path, cap=300), RunDirLog(tmp_path, cap=300)
    first.open()
    second.open()
    try:
        for n, handler in enumerate((first, second, first, second), 1):  # the 3rd write rotates, by `first`
            handler.emit(logging.LogRecord("t", logging.INFO, __file__, 1, f"line {n} " + "x" * 100, None, None))
        assert first.active and second.active

        def numbers(name: str) -> list[str]:
            return [line.split()[3] for line in (tmp_path / name).read_text().splitlines()]

        # `second` still held the rotated file: it reopened the new one rather than rotating it away
        assert numbers(ROTATED_LOG_FILE) == ["1", "2"]
        assert numbers(LOG_FILE) == ["3", "4"]
    finally:
        first.close()
        second.close()


def test_a_symlink_planted_at_the_log_is_replaced_not_followed(tmp_path: Path, root_logger: logging.Logger) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / LOG_FILE).symlink_to(victim)
    warnings = io.StringIO()
    handler = keep_log(run, stderr=warnings)  # the link is removed, never followed, and the log kept
    assert handler is not None
    log.info("goes to the new file only")
    handler.close()
    assert victim.read_text() == "untouched\n"
    assert not (run / LOG_FILE).is_symlink() and "goes to the new file only" in (run / LOG_FILE).read_text()
    assert warnings.getvalue() == ""


def test_a_fifo_at_the_log_cannot_block_init_and_is_replaced(tmp_path: Path, root_logger: logging.Logger) -> None:
    os.mkfifo(tmp_path / LOG_FILE)
    handler = keep_log(tmp_path, stderr=io.StringIO())  # ENXIO (O_NONBLOCK, no reader): removed, replaced
    assert handler is not None
    handler.close()
    assert (tmp_path / LOG_FILE).is_file()


def test_a_symlinked_run_dir_is_refused(tmp_path: Path, root_logger: logging.Logger) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run").symlink_to(tmp_path / "elsewhere")
    assert keep_log(tmp_path / "run", stderr=io.StringIO()) is None
    assert os.listdir(tmp_path / "elsewhere") == []


def test_a_failing_write_warns_once_and_turns_the_copy_off(tmp_path: Path, root_logger: logging.Logger) -> None:
    warnings = io.StringIO()
    handler = keep_log(tmp_path, cap=100, stderr=warnings)
    assert handler is not None
    (tmp_path / ROTATED_LOG_FILE).mkdir()  # rename(2) of a file over a directory: EISDIR
    (tmp_path / ROTATED_LOG_FILE / "keep").write_text("")
    for _ in range(5):
        log.info("%s", "y" * 60)  # the second line needs a rotation, which fails
    assert not handler.active
    assert warnings.getvalue().count("warning: not keeping a copy of the log") == 1
