"""NVIDIA's own ``nvidia-bug-report.sh``, run when the image has it and a GPU is present.

Which images have it: NVIDIA's .run installs it as /usr/bin/nvidia-bug-report.sh (the tree image's
route); Debian ships it in ``nvidia-driver-bin`` as /usr/lib/nvidia/current/nvidia-bug-report.sh, reached
as /usr/bin/nvidia-bug-report.sh through glx-alternative-nvidia's alternatives (nvidia-driver-bin
535.309.01-0+deb12u1; glx-alternative-nvidia's postinst ``add_slave /usr/bin/nvidia-bug-report.sh``), a
package this image's Debian route does not install. Its options (the script's own ``usage``, the same
file): ``--output-file <file>`` writes ``<file>.gz`` when gzip is found, else ``<file>``; it must run as
root, writes temporary files (``nvidia-nvml-temp$$.log``) in its working directory and appends
/proc/cmdline among many other files (the report reduces that line to the NVIDIA arguments and redacts
secret-looking values of what it copies: formats/redact.py).

It runs through the runner in a private temporary directory (also its ``TMPDIR``), in its own session
with a minimal environment (no variable of this process reaches it), for at most the time the report has
left; then its whole process group is killed and the member says so. A termination signal to
``bug-report`` kills that group and removes the directory before ``bug-report`` ends
(runtime/signalcleanup.py): its own session never gets the signal.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from driver_container.base.errors import CommandError, CommandTimeout
from driver_container.base.paths import HostPaths
from driver_container.base.resolver import Root
from driver_container.report.model import ABSENT, Member, missing
from driver_container.report.reading import read_capped, source_of
from driver_container.runtime.runner import Runner
from driver_container.runtime.signalcleanup import SignalCleanup

SCRIPT = "usr/bin/nvidia-bug-report.sh"  # in USERSPACE_ROOT
LOG_NAME = "nvidia-bug-report.log"
MEMBER = "nvidia-bug-report/nvidia-bug-report.log"
OUTPUT_MEMBER = "nvidia-bug-report/output.txt"
OUTPUT_CAP = 64 << 10
SCRIPT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def skip_reason(paths: HostPaths) -> str | None:
    """Why the script is not run, or None when it is."""
    if not paths.userspace.is_file(SCRIPT):
        return f"skipped: the image has no /{SCRIPT} (NVIDIA's .run installs it; Debian's nvidia-driver-bin: not here)"
    if not paths.proc.listdir("driver/nvidia/gpus"):
        return "skipped: no GPU under /proc/driver/nvidia/gpus"
    return None


def run_bug_report(
    paths: HostPaths, timeout: float, cap: int, runner: Runner | None = None, cleanup: SignalCleanup | None = None
) -> list[Member]:
    """The script's log (decompressed: the archive compresses it and redacts it) and its own output."""
    why = skip_reason(paths)
    if why is not None:
        return [missing(MEMBER, source_of(paths.userspace, SCRIPT), why)]
    script = str(paths.userspace.resolve(SCRIPT))
    argv_shown = f"{script} --output-file <tmp>/{LOG_NAME}"
    with _work_dir(cleanup or SignalCleanup()) as base:
        env = SCRIPT_ENV | {"TMPDIR": str(base)}  # what it or its tools put in a temporary file goes too
        try:
            code = (runner or Runner(env=env)).run_in_dir(
                (script, "--output-file", str(base / LOG_NAME)),
                cwd=base,
                output=base / "output.txt",
                timeout=timeout,
                cleanup=cleanup,
            )
            ended = f"exit status {code}" if code else ""
        except CommandTimeout as exc:
            ended = f"timed out: {exc.message}"
        except CommandError as exc:
            return [missing(MEMBER, argv_shown, f"not run: {exc.message}")]
        log, log_note = _read_log(Root(base), cap)
        output, output_note = read_capped(Root(base), "output.txt", OUTPUT_CAP)
    note = "; ".join(n for n in (log_note, ended) if n)
    return [
        Member(MEMBER, argv_shown, log, note),
        Member(OUTPUT_MEMBER, f"{script}: stdout and stderr", output, output_note),
    ]


@contextlib.contextmanager
def _work_dir(cleanup: SignalCleanup) -> Iterator[Path]:
    """A private temporary directory, removed at the end and, registered with ``cleanup``, at a signal."""
    with cleanup.held():
        work = Path(tempfile.mkdtemp(prefix="nvidia-bug-report."))
        key = cleanup.add(f"removed {work}", lambda: shutil.rmtree(work))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        cleanup.discard(key)


def _read_log(base: Root, cap: int) -> tuple[bytes | None, str]:
    compressed, _why = read_capped(base, f"{LOG_NAME}.gz", cap)
    if compressed is not None:
        return gunzip(compressed, cap)
    plain, why = read_capped(base, LOG_NAME, cap)
    return plain, "" if plain is not None else f"no log written ({why})" if why != ABSENT else "no log written"


def gunzip(data: bytes, cap: int) -> tuple[bytes, str]:
    """The script's gzip output, at most ``cap`` + 1 bytes of it: one gzip member per section it appends
    (``| gzip -c >> file``), possibly cut short by the kill; what decompresses is kept."""
    out: list[bytes] = []
    size = 0
    while data and size <= cap:
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            chunk = stream.decompress(data, cap + 1 - size)
        except zlib.error as exc:
            return b"".join(out), f"its gzip output is damaged: {exc}"
        out.append(chunk)
        size += len(chunk)
        if not stream.eof:
            return b"".join(out), "" if stream.unconsumed_tail else "its gzip output ends early"
        data = stream.unused_data
    return b"".join(out), ""
