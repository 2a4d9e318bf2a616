"""Bounded reads of host files into members (report/reading.py, report/hostfacts.py) on hostile trees."""

from __future__ import annotations

import os
import time
from pathlib import Path

from report_support import report_host

from driver_container.base.resolver import Root
from driver_container.report import hostfacts
from driver_container.report.model import Budget, Member
from driver_container.report.reading import file_member, read_capped


def test_a_fifo_at_a_proc_file_is_not_read(tmp_path: Path) -> None:
    paths = report_host(tmp_path)
    version = paths.procfs_root / "driver/nvidia/version"
    version.unlink()
    os.mkfifo(version)
    started = time.monotonic()
    members = {m.name: m for m in hostfacts.module_members(paths)}
    assert time.monotonic() - started < 2
    member = members["host/proc/driver/nvidia/version"]
    assert member.data is None and member.note == "not read: not a regular file (a FIFO)"


def test_a_huge_file_is_read_no_further_than_its_cap_and_cut_when_admitted(tmp_path: Path) -> None:
    huge = tmp_path / "params"
    with huge.open("wb") as handle:
        handle.truncate(1 << 30)  # sparse: 1 GiB that must never be read whole
    data, why = read_capped(Root(tmp_path), "params", 4096)
    assert why == "" and data is not None and len(data) == 4097
    admitted = Budget().admit(Member("p", "src", data), 4096)
    assert admitted.data is not None and len(admitted.data) == 4096
    assert admitted.note == "truncated at 4096 bytes"


def test_links_resolve_inside_their_root_never_outside(tmp_path: Path) -> None:
    (tmp_path / "outside").write_text("secret of the machine\n")
    root = tmp_path / "root"
    root.mkdir()
    (root / "outside").write_text("inside copy\n")
    (root / "link").symlink_to("/outside")  # absolute: restarts at the root, as chroot would
    (root / "up").symlink_to("../../outside")  # '..' stops at the root
    (root / "real").symlink_to(tmp_path / "outside")  # the machine's path: not below the root
    assert file_member(Root(root), "link", "x").data == b"inside copy\n"
    assert file_member(Root(root), "up", "x").data == b"inside copy\n"
    assert file_member(Root(root), "real", "x").note == "absent"


def test_the_archive_budget_cuts_the_last_members_and_says_why() -> None:
    budget = Budget(total_cap=100)
    first = budget.admit(Member("a", "s", b"x" * 80), 1000)
    second = budget.admit(Member("b", "s", b"y" * 80), 1000)
    third = budget.admit(Member("c", "s", b"z"), 1000)
    assert first.note == "" and second.data == b"y" * 20
    assert second.note == "truncated at 20 bytes (the archive's size cap)"
    assert third.data == b"" and budget.bytes_left == 0


def test_a_log_keeps_its_newest_lines() -> None:
    admitted = Budget().admit(Member("log", "s", b"old\n" * 10 + b"newest\n"), 11, keep_end=True)
    assert admitted.data == b"old\nnewest\n" and admitted.note.endswith("the oldest left out")


def test_module_facts_mirror_proc_and_sys(tmp_path: Path) -> None:
    paths = report_host(tmp_path)
    members = {m.name: m for m in hostfacts.module_members(paths)}
    assert members["host/sys/module/nvidia/version"].data == b"535.309.01\n"
    assert members["host/proc/driver/nvidia/gpus/0000:01:00.0/information"].data
    modules = members["host/proc/modules.nvidia"].data
    assert modules is not None and modules.startswith(b"nvidia")
    assert all(b"nvidia" in line for line in modules.splitlines())
