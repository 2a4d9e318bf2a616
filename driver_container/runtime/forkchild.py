"""The one fork of this project: a child that runs a function, with its own process group.

Used by the publisher (``supervise.run_in_child``), the check after Ready (``supervise.BackgroundChild``)
and the bug report's timed steps (``timedchild.run_until``). The child ignores termination signals (its
parent decides), dies with its parent (PR_SET_PDEATHSIG) and sends its result through a pipe
(``childresult``). It leads a process group of its own, which every process it starts (``ldconfig``
through ``runtime/runner.py``, a script and its children) joins: the parent kills it with all of them in
one ``killpg`` (``kill_group``), so no orphan, e.g. an ``ldconfig`` still writing into the staging area,
outlives a stop. The child has one exception boundary (``child_main``): an expected error goes to the
parent as it is; anything else is one line at error level and exit ``INTERNAL_EXIT``, its traceback only
at debug level (``--verbose``), never in the default log that ``bug-report`` archives.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable

from driver_container.base.errors import DriverContainerError
from driver_container.runtime.childresult import encode_result

log = logging.getLogger(__name__)

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
INTERNAL_EXIT = 70  # EX_SOFTWARE (sysexits.h): a bug, distinct from every DriverContainerError's exit code
# After the SIGKILL of a group: how long its processes get to be gone. SIGKILL ends a process as soon as
# it leaves the kernel; only one stuck in a hung filesystem (D state) takes longer. With the 1 s grace
# of run_in_child this keeps a SIGTERM answered within 2 s.
GROUP_EXIT_S = 0.5


def internal_error_line(exc: BaseException) -> str:
    """The one line an unexpected exception (a bug) is shown as: ``internal error: <type>: <first line>``
    (200 characters at most), never a traceback: a forked child's boundary and the CLI's use it."""
    detail = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"internal error: {type(exc).__name__}{': ' + detail if detail else ''}"


def fork_child(func: Callable[[], object]) -> tuple[int, int]:
    """Fork a child that runs ``func`` (``child_main``); its pid (= its process group) and the pipe its
    result comes through."""
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child; its result is asserted through the parent
        os.close(read_fd)
        child_main(func, write_fd, parent)
    os.close(write_fd)
    # Also here, not only in the child: whichever runs first, the group exists before the parent can kill
    # it (the classic double setpgid of job-control shells). ESRCH/EACCES: the child already died or set it.
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)
    return pid, read_fd


def child_main(func: Callable[[], object], write_fd: int, parent: int) -> None:
    code = 0
    payload: tuple[str, object]
    try:
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)
        for signum in HANDLED_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        _die_with_parent(parent)
        payload = ("ok", func())
    except DriverContainerError as exc:
        payload, code = ("error", exc), exc.exit_code
    except BaseException as exc:  # the child's one boundary: never continue in a forked copy
        line = internal_error_line(exc)
        log.error("%s (in the forked child, pid %d)", line, os.getpid())
        log.debug("the traceback of that internal error", exc_info=exc)  # --verbose only
        payload, code = ("error", DriverContainerError(line, fix=INTERNAL_FIX)), INTERNAL_EXIT
    try:
        data = encode_result(payload)
    except Exception:
        data = encode_result(("error", DriverContainerError(str(payload[1]))))
    with contextlib.suppress(OSError):
        _write_all(write_fd, data)
    os._exit(code)


INTERNAL_FIX = "run again with --verbose (VERBOSE=true) for the traceback and report it"


def kill_group(pid: int) -> None:
    """SIGKILL the child ``pid`` and every process in its group (what it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):  # not yet its own group (it died before setpgid)
        os.kill(pid, signal.SIGKILL)


def await_group_exit(pgid: int, within: float = GROUP_EXIT_S) -> bool:
    """After ``kill_group`` and the child reaped: wait until no process of the group is left (True), at
    most ``within`` s. Members that became our children (init as PID 1 inherits orphans) are reaped."""
    deadline = time.monotonic() + within
    while True:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-pgid, os.WNOHANG)[0]:
                pass
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # pragma: no cover - another user's group by now: not ours
            return True
        if time.monotonic() >= deadline:
            log.warning("process group %d: still there %.1f s after SIGKILL (a hung filesystem?)", pgid, within)
            return False
        time.sleep(0.005)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _die_with_parent(parent: int) -> None:
    # Lazy, hot path: only the forked publish child needs ctypes (prctl); the probe and `status`
    # import this module's callers without it.
    import ctypes

    pr_set_pdeathsig = 1  # linux/prctl.h
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
