"""Signals and the forked worker of ``init``.

``Shutdown`` turns termination signals into a flag plus a wake-up pipe (``signal.set_wakeup_fd``), so a
SIGTERM ends any wait at once and cleanup runs in ordinary code. ``run_in_child`` runs the heavy
publish step in a forked child, so the long-waiting parent keeps a small RSS; ``BackgroundChild`` runs
one while the parent goes on waiting (the Node's annotations and the check of the published root after
Ready, the latter at the lowest priority).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import select
import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import TypeVar, cast, overload

from driver_container.base.errors import DriverContainerError
from driver_container.runtime.childresult import decode_result
from driver_container.runtime.forkchild import HANDLED_SIGNALS, await_group_exit, fork_child, kill_group

log = logging.getLogger(__name__)

T = TypeVar("T")


class Shutdown:
    """Records the first termination signal; ``wait`` sleeps until a timeout or a signal."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._pipe: tuple[int, int] | None = None
        self._previous: dict[int, object] = {}
        self._previous_fd = -1

    def install(self) -> Shutdown:
        read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._pipe = (read_fd, write_fd)
        self._previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        for signum in HANDLED_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def wait(self, timeout: float) -> bool:
        """True once a signal arrived (at once if one already did).

        Waiting means start-up is over: the cyclic garbage collector, which ``cli.main`` turns off for
        start-up, is turned back on here and in ``wait_readable``, where every wait of the lifecycle goes
        through (except the wait for the publishing child, which is still start-up: ``run_in_child``)."""
        gc.enable()
        if self._pipe is None or self.requested:
            return self.requested
        # A signal during select is written to the pipe by the C handler, so select returns at once.
        ready, _, _ = select.select([self._pipe[0]], [], [], max(timeout, 0.0))
        if ready:
            self._drain()
        return self.requested

    def wait_readable(self, fd: int, timeout: float | None, *, start_up_over: bool = True) -> bool:
        """Sleep until ``fd`` is readable (True), a first signal arrives or ``timeout`` passes (False).

        ``start_up_over=False`` keeps the collector off: the parent waiting for its publishing child is
        still starting (a collection there costs ~5 ms of a restart, bench/README.md)."""
        if start_up_over:
            gc.enable()  # see ``wait``
        wake = self._pipe is not None and not self.requested
        watched = [fd, self._pipe[0]] if wake and self._pipe is not None else [fd]
        ready, _, _ = select.select(watched, [], [], None if timeout is None else max(timeout, 0.0))
        if self._pipe is not None and self._pipe[0] in ready:
            self._drain()
        return fd in ready

    def _drain(self) -> None:
        assert self._pipe is not None
        with contextlib.suppress(BlockingIOError):
            while os.read(self._pipe[0], 64):
                pass

    def restore(self) -> None:
        if self._pipe is None:
            return
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._previous_fd)
        for fd in self._pipe:
            os.close(fd)
        self._pipe = None

    def describe(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "no signal"


CHILD_GRACE_S = 1.0  # after a signal: time for the child to finish; then it is killed (SIGTERM within 2 s)


@overload
def run_in_child(func: Callable[[], T]) -> T: ...
@overload
def run_in_child(func: Callable[[], T], stop: Shutdown, grace_s: float = ...) -> T | None: ...
def run_in_child(func: Callable[[], T], stop: Shutdown | None = None, grace_s: float = CHILD_GRACE_S) -> T | None:
    """Run ``func`` in a forked child and return its result (or raise its error).

    With ``stop``: after a termination signal the child gets ``grace_s`` to finish, then it is killed
    (SIGKILL; it may be stuck in a read of a slow or hostile file) and None is returned; what it left half
    done is for the caller to undo (the publish journal). So SIGTERM is honoured within 2 s at every stage.

    Publishing imports the planner and the copier and may hash every file; done in a child, none of that stays
    in the parent that then waits for days (bench/run_all.py bounds the waiting RSS). The child ignores termination
    signals (the parent decides) and dies with its parent (PR_SET_PDEATHSIG), as it would with the
    container's PID namespace. Without the kill a child stuck on a hostile file would keep the pod from
    stopping (docs/init.md: a signal at any stage ends init within 2 s).
    """
    pid, read_fd = fork_child(func)
    try:
        data = _collect(read_fd, pid, stop, grace_s)  # before waitpid: a large result must not block
    finally:
        os.close(read_fd)
    _, status, usage = os.wait4(pid, 0)
    # ru_maxrss of the child is in KiB on Linux (getrusage(2)); bench/run_all.py reads this line.
    log.info("publishing process (pid %d): peak RSS %.1f MB", pid, usage.ru_maxrss / 1024)
    if data is None:  # killed after a signal: what it left half done is the caller's to undo
        await_group_exit(pid)  # its ldconfig too: nothing may write into staging while that is undone
        return None
    kind, value = decode_result(data)
    if kind == "ok":
        return cast(T, value)
    if kind == "error" and isinstance(value, DriverContainerError):
        raise value
    how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.waitstatus_to_exitcode(status)}"
    raise DriverContainerError(
        f"the publishing process (pid {pid}) ended without a result ({how})",
        fix="see the messages above; run init again (publishing is idempotent)",
    )


def _collect(read_fd: int, pid: int, stop: Shutdown | None, grace_s: float) -> bytes | None:
    """Everything the child writes, until EOF; the child is killed ``grace_s`` after a signal."""
    chunks: list[bytes] = []
    deadline: float | None = None
    while True:
        if deadline is None and stop is not None and stop.requested:
            deadline = time.monotonic() + grace_s
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            log.warning("%s: stopping the publishing process (pid %d)", stop and stop.describe(), pid)
            kill_group(pid)
            return None
        if stop is not None and not stop.wait_readable(read_fd, remaining, start_up_over=False):
            continue
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def lowest_priority() -> None:
    """nice 19 and SCHED_IDLE (sched(7)): the child runs only on CPU time nothing else wants."""
    os.nice(19)
    with contextlib.suppress(OSError, AttributeError):  # refused under some seccomp profiles: nice still holds
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


class BackgroundChild:
    """A forked child running ``func`` while the parent goes on with its own waits, at the parent's priority:
    ``func`` calls ``lowest_priority`` when its work may wait (after_ready: the Node first, then hashing).

    The parent polls ``fileno`` (readable when the child wrote its result or died), then calls ``collect``;
    ``kill`` ends it at once (SIGKILL, reaped), for a termination signal. Errors of ``func`` are logged by
    ``collect``, never raised: what it checks is advisory.
    """

    def __init__(self, func: Callable[[], object], what: str) -> None:
        self.what = what
        pid, self._fd = fork_child(func)
        self.pid: int | None = pid
        self._chunks: list[bytes] = []

    def fileno(self) -> int:
        return self._fd

    @property
    def running(self) -> bool:
        return self.pid is not None

    def collect(self) -> bool:
        """Read what is there; True once the child is done (then reaped, its outcome logged)."""
        chunk = os.read(self._fd, 1 << 16)
        if chunk:
            self._chunks.append(chunk)
            return False
        self._reap()
        kind, value = decode_result(b"".join(self._chunks))
        if kind == "error":
            log.warning("%s failed: %s", self.what, value.message if isinstance(value, DriverContainerError) else value)
        elif kind != "ok":
            log.warning("%s ended without a result", self.what)
        return True

    def kill(self) -> None:
        if self.pid is not None:
            pid = self.pid
            kill_group(pid)
            log.info("stopped the %s (pid %d)", self.what, pid)
            self._reap()
            await_group_exit(pid)

    def _reap(self) -> None:
        if self.pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = None
            os.close(self._fd)
