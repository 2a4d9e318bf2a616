"""The one place that starts processes.

Tools are looked up by name on PATH at call time (so tests and operators can substitute them), never
through a shell. A runner may carry a set of forbidden tool names: on Talos the lifecycle builds it with
``MODULE_TOOLS`` so that no code path, not even an error path, can load or unload a module. A runner made
``stoppable`` by a ``Shutdown`` (``init`` does, first thing) kills a command that still runs when a
termination signal arrives (``CommandStopped``), so a hung tool (an nvidia-smi on a GPU in a bad state,
a mount on a stuck filesystem) cannot hold a SIGTERM past ``STOP_POLL_S``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from driver_container.base.errors import CommandError, CommandStopped, CommandTimeout, ForbiddenCommandError
from driver_container.base.fileread import why
from driver_container.base.records import NamedRecord
from driver_container.runtime.forkchild import kill_group

if TYPE_CHECKING:
    from driver_container.runtime.signalcleanup import SignalCleanup
    from driver_container.runtime.supervise import Shutdown

log = logging.getLogger(__name__)

# Talos drops CAP_SYS_MODULE from every pod and loads the nvidia modules itself (machine config).
MODULE_TOOLS = frozenset({"modprobe", "rmmod", "insmod"})
# How often a stoppable run looks at the signal flag while its command runs: with the kill and the exit
# after it, well inside the 2 s a SIGTERM is answered in. Polled, not woken through Shutdown's pipe: the
# publishing child holds a copy of that pipe and must not take the parent's wake-up byte.
STOP_POLL_S = 0.1


def children_search_path() -> str:
    """The PATH this process's children inherit (``Runner`` hands them its environment): an input of the
    unchanged-publish check (publish/unchanged.py)."""
    return os.environ.get("PATH", "")


class CompletedCommand(NamedRecord):
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class Runner:
    def __init__(
        self,
        *,
        forbidden: frozenset[str] = frozenset(),
        env: Mapping[str, str] | None = None,
        stop: Shutdown | None = None,
    ) -> None:
        self.forbidden = forbidden
        self.env = dict(os.environ if env is None else env)
        self.stop = stop

    def forbid(self, names: frozenset[str]) -> Runner:
        return Runner(forbidden=self.forbidden | names, env=self.env, stop=self.stop)

    def stoppable(self, stop: Shutdown | None) -> Runner:
        """This runner, killing a command that still runs once ``stop`` has a signal (``CommandStopped``);
        None: one that lets every command run to its end or timeout (the cleanup after a signal)."""
        return Runner(forbidden=self.forbidden, env=self.env, stop=stop)

    def _stopped(self, proc: subprocess.Popen[str] | subprocess.Popen[bytes], argv: Sequence[str]) -> CommandError:
        proc.kill()
        proc.wait()
        why = self.stop.describe() if self.stop is not None else "a signal"
        log.info("%s received: killed %s (pid %d)", why, argv[0], proc.pid)
        return CommandStopped(f"{argv[0]}: stopped by {why}", argv=tuple(argv))

    def which(self, name: str) -> str:
        if os.path.basename(name) in self.forbidden:
            raise ForbiddenCommandError(
                f"refusing to run {name}: this platform owns the kernel modules",
                argv=(name,),
                fix="load modules through the Talos machine config (machine.kernel.modules)",
            )
        if "/" in name:
            # A path is run as given: the kernel says why it cannot (shutil.which would call a file on a
            # noexec mount "not found", driverroot/proof.py needs the EACCES).
            return name
        found = shutil.which(name, path=self.env.get("PATH", os.defpath))
        if found is None:
            raise CommandError(f"{name}: not found on PATH ({self.env.get('PATH', '')})", argv=(name,))
        return found

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float = 120.0,
        check: bool = True,
        stdin: str | None = None,
        cwd: str | None = None,
    ) -> CompletedCommand:
        """``cwd``: the child's working directory (a /proc/self/fd/N path names a descriptor of ours: the child
        changes directory before exec closes it, driverroot/procsys.py)."""
        args = (self.which(argv[0]), *argv[1:])
        log.debug("running %s", " ".join(argv))
        try:
            if self.stop is not None:
                done = self._run_stoppable(args, argv, stdin, timeout, cwd)
            else:
                proc = subprocess.run(
                    args,
                    input=stdin,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    env=self.env,
                    check=False,
                    cwd=cwd,
                )
                done = CompletedCommand(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
        except subprocess.TimeoutExpired as exc:
            raise CommandError(f"{argv[0]}: timed out after {timeout:g} s", argv=tuple(argv)) from exc
        except OSError as exc:
            raise CommandError(f"{argv[0]}: cannot run: {why(exc)}", argv=tuple(argv)) from exc
        if check and done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            raise CommandError(
                f"{' '.join(argv)} exited {done.returncode}" + (f": {detail[-1]}" if detail else ""),
                argv=tuple(argv),
                returncode=done.returncode,
            )
        return done

    def _run_stoppable(
        self, args: tuple[str, ...], argv: Sequence[str], stdin: str | None, timeout: float, cwd: str | None
    ) -> CompletedCommand:
        """``subprocess.run`` as ``run`` calls it, looking at the signal flag every ``STOP_POLL_S``."""
        assert self.stop is not None
        pipe = subprocess.PIPE
        proc = subprocess.Popen(
            args,
            stdin=pipe if stdin is not None else subprocess.DEVNULL,
            stdout=pipe,
            stderr=pipe,
            text=True,
            env=self.env,
            cwd=cwd,
        )
        deadline = time.monotonic() + timeout
        feed = stdin  # given to the first communicate only (a retry keeps what it read and wrote)
        while True:
            if self.stop.requested:
                raise self._stopped(proc, argv)
            left = deadline - time.monotonic()
            try:
                out, err = proc.communicate(feed, timeout=max(min(STOP_POLL_S, left), 0.0))
            except subprocess.TimeoutExpired:
                feed = None
                if left <= STOP_POLL_S:
                    proc.kill()
                    proc.communicate()
                    raise
                continue
            return CompletedCommand(tuple(argv), proc.returncode, out, err)

    def exit_status(self, argv: Sequence[str], *, timeout: float = 120.0) -> int:
        """Run with no input and output discarded; its exit status. The cheapest start there is: with an
        absolute path and ``close_fds=False`` subprocess takes posix_spawn(3) (Lib/subprocess.py
        ``_USE_POSIX_SPAWN``), not fork+exec: ~1 ms less on every ``init`` (driverroot/proof.py). Nothing
        leaks into the child: every descriptor Python opens is non-inheritable (PEP 446)."""
        args = (self.which(argv[0]), *argv[1:])
        log.debug("running %s", " ".join(argv))
        quiet = subprocess.DEVNULL
        try:
            proc = subprocess.Popen(args, stdin=quiet, stdout=quiet, stderr=quiet, close_fds=False, env=self.env)
        except OSError as exc:
            raise CommandError(f"{argv[0]}: cannot run: {why(exc)}", argv=tuple(argv)) from exc
        with proc:
            if not self._exited_in_time(proc, argv, timeout):
                proc.kill()
                proc.wait()
                raise CommandError(f"{argv[0]}: timed out after {timeout:g} s", argv=tuple(argv))
            return proc.wait()

    def _exited_in_time(self, proc: subprocess.Popen[bytes], argv: Sequence[str], timeout: float) -> bool:
        """Whether ``proc`` ended within ``timeout``; ``CommandStopped`` at a signal (a stoppable runner).
        Waited through a pidfd (pidfd_open(2)): woken at its exit, no polling on the restart's path."""
        if self.stop is None:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout
        try:
            pidfd = os.pidfd_open(proc.pid)
        except OSError:  # ENOSYS (Linux < 5.3) or refused by a seccomp profile: polled instead
            pidfd = -1
        try:
            while not self.stop.requested:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if pidfd >= 0 and select.select([pidfd], [], [], min(STOP_POLL_S, left))[0]:
                    return True
                if pidfd < 0 and proc.poll() is not None:
                    return True
                if pidfd < 0:
                    time.sleep(min(0.01, left))
        finally:
            if pidfd >= 0:
                os.close(pidfd)
        raise self._stopped(proc, argv)

    def run_in_dir(
        self, argv: Sequence[str], *, cwd: Path, output: Path, timeout: float, cleanup: SignalCleanup | None = None
    ) -> int:
        """Run in ``cwd`` with stdout and stderr written to ``output`` (a new file, never through a link);
        its exit status. The command gets its own session: at ``timeout`` the whole process group is
        killed (a script's children too, e.g. a hung nvidia-smi) and ``CommandTimeout`` raised; when it
        ends, what it left running in its group is killed too. A termination signal never reaches that
        session: with ``cleanup`` the signal kills the group (registered before a signal is acted on)."""
        args = (self.which(argv[0]), *argv[1:])
        log.debug("running %s in %s", " ".join(argv), cwd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(output, flags, 0o600)
        except OSError as exc:
            raise CommandError(f"{output}: cannot create: {why(exc)}", argv=tuple(argv)) from exc
        with cleanup.held() if cleanup is not None else contextlib.nullcontext():
            try:
                proc = subprocess.Popen(
                    args,
                    cwd=cwd,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=fd,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise CommandError(f"{argv[0]}: cannot run: {why(exc)}", argv=tuple(argv)) from exc
            finally:
                os.close(fd)
            what = f"killed {argv[0]} and its process group {proc.pid}"
            key = cleanup.kill_group_on_signal(proc.pid, what) if cleanup is not None else 0
        try:
            return proc.wait(timeout=max(timeout, 0.0))
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.wait()
            raise CommandTimeout(f"{argv[0]}: timed out after {timeout:.3g} s; killed", argv=tuple(argv)) from None
        finally:
            kill_group(proc.pid)  # what it left behind: nothing of it outlives the run
            if cleanup is not None:
                cleanup.discard(key)

    def spawn(self, argv: Sequence[str], *, output: Path | None = None) -> subprocess.Popen[bytes]:
        """Start a long-running daemon; the caller owns its lifetime. ``output``: a file its stdout and
        stderr are appended to (kept for the log tail of an error), else both are inherited."""
        args = (self.which(argv[0]), *argv[1:])
        log.info("starting %s", " ".join(argv))
        fd = -1
        try:
            if output is not None:
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(output, flags, 0o644)
            sink = fd if fd >= 0 else None
            return subprocess.Popen(args, env=self.env, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)
        except OSError as exc:
            raise CommandError(f"{argv[0]}: cannot start: {why(exc)}", argv=tuple(argv)) from exc
        finally:
            if fd >= 0:
                os.close(fd)
