"""base/fileread.py: the one safe read (no final link, no blocking, regular files only, bounded) and the one
boundary that turns its OSError into the caller's error class."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from driver_container.base.errors import HostFileNotFound, HostReadError, KubernetesError, PublishError
from driver_container.base.fileread import (
    converted,
    kind_of,
    open_below,
    open_following,
    open_nofollow,
    read_up_to,
    refuse_irregular,
    refuse_larger,
    regular_stat,
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir/file").write_bytes(b"x" * 100)
    (tmp_path / "link").symlink_to("dir/file")
    (tmp_path / "dirlink").symlink_to("dir")
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        return exc.errno == errno.EBADF
    return False


def test_a_final_link_is_refused_unless_followed_by_design(tree: Path) -> None:
    with pytest.raises(OSError) as refused:
        open_nofollow(tree / "link")
    assert refused.value.errno == errno.ELOOP
    fd = open_following(tree / "link")
    try:
        assert regular_stat(fd) is not None and read_up_to(fd, 1000) == b"x" * 100
    finally:
        os.close(fd)


def test_below_a_root_a_link_at_any_component_is_refused(tree: Path) -> None:
    with pytest.raises(OSError) as refused:
        open_below(tree, "dirlink/file")
    assert refused.value.errno == errno.ELOOP
    fd = open_below(tree, "dir/file")
    os.close(fd)


def test_a_fifo_opens_without_blocking_and_is_refused_closed(tree: Path) -> None:
    fd = open_nofollow(tree / "fifo")  # O_NONBLOCK: no writer needed (pytest-timeout bounds a regression)
    assert kind_of(fd) == "a FIFO" and regular_stat(fd) is None
    with pytest.raises(PublishError) as refused:
        refuse_irregular(fd, "shown/fifo", error=PublishError, fix="replace it")
    assert (refused.value.message, refused.value.path, refused.value.fix) == (
        "shown/fifo: not a regular file",
        "shown/fifo",
        "replace it",
    )
    assert _closed(fd)


def test_the_subject_is_named_where_asked(tree: Path) -> None:
    fd = open_nofollow(tree / "fifo")
    with pytest.raises(KubernetesError, match=r"^p: token is not a regular file$"):
        refuse_irregular(fd, "p", error=KubernetesError, what="token")
    with pytest.raises(KubernetesError, match=r"^p: token is larger than 3 bytes$"):
        refuse_larger(b"abcd", 3, "p", error=KubernetesError, what="token")


def test_a_read_stops_at_its_count_and_larger_is_refused(tree: Path) -> None:
    fd = open_nofollow(tree / "dir/file")
    try:
        assert read_up_to(fd, 11) == b"x" * 11
    finally:
        os.close(fd)
    assert refuse_larger(b"x" * 10, 10, "f") == b"x" * 10
    with pytest.raises(HostReadError, match=r"^f: larger than 9 bytes$"):
        refuse_larger(b"x" * 10, 9, "f")


def test_the_boundary_keeps_the_errno_specific_classes(tree: Path) -> None:
    gone, below, link = tree / "gone", tree / "dir/file/below", tree / "link"
    with pytest.raises(HostFileNotFound, match=r"/gone: no such file$"), converted(gone, missing=HostFileNotFound):
        open_nofollow(gone)
    with pytest.raises(HostFileNotFound, match=r"/below: no such file$"), converted(below, missing=HostFileNotFound):
        open_nofollow(below)  # ENOTDIR: a file where a directory should be
    looping = converted(link, verb="cannot open", loop="a link appeared")
    with pytest.raises(HostReadError, match=r"/link: cannot open: a link appeared$") as looped, looping:
        open_nofollow(link)
    assert type(looped.value) is HostReadError and isinstance(looped.value.__cause__, OSError)


def test_the_boundary_names_the_os_reason_and_passes_other_errors(tree: Path) -> None:
    publishing = converted("p", error=PublishError, fix="make p readable")
    with pytest.raises(PublishError, match=r"^p: cannot read: No such file or directory$") as failed, publishing:
        open_nofollow(tree / "gone")
    assert failed.value.fix == "make p readable"
    with pytest.raises(ValueError, match="not an OSError"), converted("p"):
        raise ValueError("not an OSError")
