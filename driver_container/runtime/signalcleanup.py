"""Undo on a termination signal: a command that starts processes in sessions of their own or writes
temporary files registers how to end and remove them, and a SIGTERM, SIGINT, SIGHUP or SIGQUIT runs
those steps (the newest first) before the process ends as that signal ends it by default.

``bug-report`` needs it: nvidia-bug-report.sh runs in a session of its own (``Runner.run_in_dir``), so the
signal that ends ``bug-report`` (kubectl's, a terminal's ^C, the kubelet's SIGTERM) never reaches it, and
it kept running, writing into a temporary directory nothing removed. The handler runs in the main thread
between two bytecodes, so it may interrupt any step: ``held`` defers a signal while a step creates a
resource and registers it (a process started but not yet registered would outlive the signal), and a
step removes its registration only once what it registered is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable, Iterator
from types import FrameType

from driver_container.runtime.forkchild import HANDLED_SIGNALS, await_group_exit, kill_group

log = logging.getLogger(__name__)

Undo = Callable[[], object]


class SignalCleanup:
    """Registered undo steps, run at the first termination signal; then the process ends by that signal."""

    def __init__(self) -> None:
        self._steps: dict[int, tuple[str, Undo]] = {}
        self._next = 0
        self._held = 0
        self._pending: int | None = None
        self._ending = False
        self._previous: dict[int, object] = {}

    def install(self) -> SignalCleanup:
        for signum in HANDLED_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]
        self._previous.clear()

    def add(self, what: str, undo: Undo) -> int:
        """Register ``undo`` (``what`` names it in the log); its key for ``discard``."""
        self._next += 1
        self._steps[self._next] = (what, undo)
        return self._next

    def discard(self, key: int) -> None:
        self._steps.pop(key, None)

    def kill_group_on_signal(self, pgid: int, what: str) -> int:
        return self.add(what, lambda: end_group(pgid))

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A signal arriving inside is acted on when the outermost ``held`` ends."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if not self._held and self._pending is not None:
                self._end(self._pending)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self._ending:
            return  # a second signal while the first one's steps run
        if self._held:
            self._pending = self._pending or signum
            return
        self._end(signum)

    def _end(self, signum: int) -> None:
        self._ending = True
        name = signal.Signals(signum).name
        for what, undo in reversed(list(self._steps.values())):
            try:
                undo()
            except Exception as exc:  # one step's failure must not keep the others or the exit from running
                log.warning("%s received: %s failed: %s", name, what, exc)
            else:
                log.info("%s received: %s", name, what)
        self._steps.clear()
        self.restore()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # pragma: no cover - only when the signal is blocked


def end_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` (a session's leader's: pgid == its pid), reap its leader when
    it is our child, and wait briefly until none of its processes is left. Only ``killpg``: the kernel
    reuses no pid while it names a group that still has a process."""
    kill_group(pgid)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pgid, 0)
    await_group_exit(pgid)
