from __future__ import annotations

import os
import select
import signal
from pathlib import Path
from typing import Any, cast

import pytest

from driver_container.base.errors import DriverContainerError, PublishError
from driver_container.lifecycle import publishing
from driver_container.runtime.supervise import BackgroundChild, run_in_child


def test_result_comes_back_from_the_child() -> None:
    assert run_in_child(lambda: ("595.91.07", os.getpid()))[0] == "595.91.07"
    assert run_in_child(os.getpid) != os.getpid()  # it really ran elsewhere


def test_expected_error_keeps_its_class_message_and_fix() -> None:
    def fail() -> None:
        raise PublishError("/run/nvidia/driver/usr: cannot write: No space left on device", fix="free space")

    with pytest.raises(PublishError) as caught:
        run_in_child(fail)
    assert caught.value.message.endswith("No space left on device")
    assert caught.value.fix == "free space"
    assert caught.value.exit_code == 1


def test_child_ignores_termination_signals() -> None:
    def signalled() -> str:
        os.kill(os.getpid(), signal.SIGTERM)  # a publish in progress is finished, never cut
        return "finished"

    assert run_in_child(signalled) == "finished"


def test_child_dying_without_a_result_is_an_error() -> None:
    def crash() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    with pytest.raises(DriverContainerError, match=r"ended without a result \(signal 9\)"):
        run_in_child(crash)


def test_after_ready_reports_the_node_before_dropping_to_the_lowest_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Node's annotations are looked for by people and consumers: only the hashing may wait for idle CPU."""
    seen = tmp_path / "niceness"

    def note(step: str) -> bool:
        with open(seen, "a") as out:
            out.write(f"{step} {os.nice(0)}\n")
        return True

    monkeypatch.setattr(publishing, "report_ready", lambda published, cluster: note("report"))
    monkeypatch.setattr(publishing, "check_published_root", lambda paths: note("check"))
    child = BackgroundChild(
        lambda: publishing.after_ready(cast(Any, None), cast(Any, None), cast(Any, None)), "after Ready"
    )
    for _ in range(100):  # bounded: 10 s at most
        select.select([child], [], [], 0.1)
        if child.collect():
            break
    base = os.nice(0)
    assert seen.read_text().splitlines() == [f"report {base}", f"check {min(base + 19, 19)}"]
