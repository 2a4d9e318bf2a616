"""``init`` with almost no free file descriptors (RLIMIT_NOFILE lowered in the child): every limit ends in
an error naming the I/O error (EMFILE, "Too many open files") and the path, never in USERSPACE_MISSING.
Before, at 10-11 free descriptors the userspace scan's unreadable directories were read as empty and
``init`` refused "no libcuda.so.<version> or libnvidia-ml.so.<version> under USERSPACE_ROOT"."""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

import pytest
from helpers.hostenv import make_host

# Below 8 the interpreter fails before the CLI runs; from 16 on the fixture host's init passes. Each limit
# in between runs out at another step (RUN_DIR, the host reads, the userspace scan, the publish).
LIMITS = range(8, 16)


def _init_with_nofile(base: Path, limit: int) -> subprocess.CompletedProcess[str]:
    h = make_host(base)

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return subprocess.run(
        h.argv("init", "--no-wait"),
        env=h.env,
        cwd=h.base,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=lower,  # only setrlimit runs between fork and exec
    )


@pytest.mark.timeout(180)
def test_init_out_of_descriptors_names_the_io_error_never_a_missing_library(tmp_path: Path) -> None:
    ran_out, errors = [], []
    for limit in LIMITS:
        done = _init_with_nofile(tmp_path / f"nofile-{limit}", limit)
        assert "Traceback" not in done.stderr, (limit, done.stderr)
        assert "USERSPACE_MISSING" not in done.stderr, (limit, done.stderr)
        if done.returncode != 0:
            error = [line for line in done.stderr.splitlines() if line.startswith("nvidia-driver: error:")]
            assert error and "Too many open files" in error[-1], (limit, done.stderr)
            ran_out.append(limit)
            errors.append(error[-1])
    assert len(ran_out) >= 4, ran_out  # the limits really ran it out of descriptors
    assert any("Too many open files (EMFILE)" in e for e in errors), errors  # named by its errno
