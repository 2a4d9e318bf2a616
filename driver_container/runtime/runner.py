"""The one place that starts processes.

Tools are looked up by name on PATH at call time (so tests and operators can substitute them), never
through a shell. A runner may carry a set of forbidden tool names: on Talos the lifecycle builds it with
``MODULE_TOOLS`` so that no code path, not even an error path, can load or unload a module.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from driver_container.errors import CommandError, CommandTimeout, ForbiddenCommandError
from driver_container.records import NamedRecord

log = logging.getLogger(__name__)

# Talos drops CAP_SYS_MODULE from every pod and loads the nvidia modules itself (machine config).
MODULE_TOOLS = frozenset({"modprobe", "rmmod", "insmod"})


class CompletedCommand(NamedRecord):
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class Runner:
    def __init__(self, *, forbidden: frozenset[str] = frozenset(), env: Mapping[str, str] | None = None):
        self.forbidden = forbidden
        self.env = dict(os.environ if env is None else env)

    def forbid(self, names: frozenset[str]) -> Runner:
        return Runner(forbidden=self.forbidden | names, env=self.env)

    def which(self, name: str) -> str:
        if os.path.basename(name) in self.forbidden:
            raise ForbiddenCommandError(
                f"refusing to run {name}: this platform owns the kernel modules",
                argv=(name,),
                fix="load modules through the Talos machine config (machine.kernel.modules)",
            )
        if "/" in name:
            # A path is run as given: the kernel says why it cannot (shutil.which would call a file on a
            # noexec mount "not found", node/rootusable.py needs the EACCES).
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
        changes directory before exec closes it, node/rootproc.py)."""
        args = (self.which(argv[0]), *argv[1:])
        log.debug("running %s", " ".join(argv))
        try:
            proc = subprocess.run(
                args, input=stdin, capture_output=True, text=True, timeout=timeout, env=self.env, check=False, cwd=cwd
            )
        except subprocess.TimeoutExpired as exc:
            raise CommandError(f"{argv[0]}: timed out after {timeout:g} s", argv=tuple(argv)) from exc
        except OSError as exc:
            raise CommandError(f"{argv[0]}: cannot run: {exc.strerror}", argv=tuple(argv)) from exc
        done = CompletedCommand(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise CommandError(
                f"{' '.join(argv)} exited {proc.returncode}" + (f": {detail[-1]}" if detail else ""),
                argv=tuple(argv),
                returncode=proc.returncode,
            )
        return done

    def exit_status(self, argv: Sequence[str], *, timeout: float = 120.0) -> int:
        """Run with no input and output discarded; its exit status. The cheapest start there is: with an
        absolute path and ``close_fds=False`` subprocess takes posix_spawn(3) (Lib/subprocess.py
        ``_USE_POSIX_SPAWN``), not fork+exec: ~1 ms less on every ``init`` (node/rootusable.py). Nothing
        leaks into the child: every descriptor Python opens is non-inheritable (PEP 446)."""
        args = (self.which(argv[0]), *argv[1:])
        log.debug("running %s", " ".join(argv))
        quiet = subprocess.DEVNULL
        try:
            done = subprocess.run(args, stdin=quiet, stdout=quiet, stderr=quiet, close_fds=False, timeout=timeout,
                                  env=self.env, check=False)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise CommandError(f"{argv[0]}: timed out after {timeout:g} s", argv=tuple(argv)) from exc
        except OSError as exc:
            raise CommandError(f"{argv[0]}: cannot run: {exc.strerror}", argv=tuple(argv)) from exc
        return done.returncode

    def run_in_dir(self, argv: Sequence[str], *, cwd: Path, output: Path, timeout: float) -> int:
        """Run in ``cwd`` with stdout and stderr written to ``output`` (a new file, never through a link);
        its exit status. The command gets its own session: at ``timeout`` the whole process group is
        killed (a script's children too, e.g. a hung nvidia-smi) and ``CommandTimeout`` raised."""
        args = (self.which(argv[0]), *argv[1:])
        log.debug("running %s in %s", " ".join(argv), cwd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(output, flags, 0o600)
        except OSError as exc:
            raise CommandError(f"{output}: cannot create: {exc.strerror}", argv=tuple(argv)) from exc
        try:
            proc = subprocess.Popen(args, cwd=cwd, env=self.env, stdin=subprocess.DEVNULL, stdout=fd,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        except OSError as exc:
            raise CommandError(f"{argv[0]}: cannot run: {exc.strerror}", argv=tuple(argv)) from exc
        finally:
            os.close(fd)
        try:
            return proc.wait(timeout=max(timeout, 0.0))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its session's group: pgid == its pid
            proc.wait()
            raise CommandTimeout(f"{argv[0]}: timed out after {timeout:.3g} s; killed", argv=tuple(argv)) from None

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
            raise CommandError(f"{argv[0]}: cannot start: {exc.strerror}", argv=tuple(argv)) from exc
        finally:
            if fd >= 0:
                os.close(fd)
