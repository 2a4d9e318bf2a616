"""An I/O or resource error is never a missing file: only ENOENT and ENOTDIR mean "not there"
(fileread.converted); EMFILE, ENFILE, ENOMEM, EIO are named by errno, and a userspace scan that could not
read its directories is USERSPACE_UNREADABLE, not USERSPACE_MISSING (findings/modules.py). Before, at 10
free descriptors ``init`` refused "no libcuda.so.<version> ... under USERSPACE_ROOT"."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from helpers.fds import no_free_descriptor
from helpers.support import FIXTURES, fixture_paths

from driver_container.base.errors import HostFileNotFound, HostReadError
from driver_container.base.fileread import converted
from driver_container.base.resolver import Root
from driver_container.findings import check
from driver_container.inspect.hoststate import inspect_host
from driver_container.inspect.userspace import find_userspace
from driver_container.settings import Settings

HOST = FIXTURES / "hosts" / "talos-1.13-open-595"


@pytest.mark.parametrize("code", [errno.ENOENT, errno.ENOTDIR])
def test_only_enoent_and_enotdir_are_missing(code: int) -> None:
    with (
        pytest.raises(HostFileNotFound, match=r"^/x/lib: no such file$"),
        converted("/x/lib", missing=HostFileNotFound),
    ):
        raise OSError(code, os.strerror(code))


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EIO, errno.ENOBUFS])
def test_an_io_error_is_a_read_error_named_by_its_errno(code: int) -> None:
    with pytest.raises(HostReadError) as raised, converted("/x/lib", verb="cannot open", missing=HostFileNotFound):
        raise OSError(code, os.strerror(code))
    assert not isinstance(raised.value, HostFileNotFound)
    name = errno.errorcode[code]
    assert raised.value.message == f"/x/lib: cannot open: {os.strerror(code)} ({name})"


def test_eacces_keeps_the_os_words_and_is_not_missing() -> None:
    with pytest.raises(HostReadError) as raised, converted("/x/lib", missing=HostFileNotFound):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES))
    assert not isinstance(raised.value, HostFileNotFound)
    assert raised.value.message == "/x/lib: cannot read: Permission denied"


def test_a_userspace_scan_out_of_descriptors_is_unreadable_not_missing(tmp_path: Path) -> None:
    tree = Path(shutil.copytree(HOST, tmp_path / "tree", symlinks=True))
    paths = fixture_paths(tree)
    state = inspect_host(paths, Settings())
    assert state.userspace.version is not None  # the fixture has its userspace: found with descriptors free
    with no_free_descriptor():
        userspace = find_userspace(Root(paths.userspace_root))
    assert userspace.version is None and userspace.problems
    assert all("Too many open files (EMFILE)" in str(p) for p in userspace.problems), userspace.problems
    found = {f.code: f for f in check(state._replace(userspace=userspace))}
    assert "USERSPACE_MISSING" not in found
    unreadable = found["USERSPACE_UNREADABLE"]
    assert unreadable.severity == "error" and "Too many open files (EMFILE)" in unreadable.message
    assert str(paths.userspace_root / "usr/lib") in unreadable.message and "RLIMIT_NOFILE" in unreadable.fix
