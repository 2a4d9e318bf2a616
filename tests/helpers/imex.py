"""A real userspace that has ``nvidia-imex`` and ``nvidia-imex-ctl`` (docs/imex.md).

Debian packages no IMEX (none of its NVIDIA suites has an nvidia-imex package), and NVIDIA's ``.run`` that
ships it cannot be downloaded here. So the binaries are STAND-INS: small C programs built here with gcc,
dynamically linked against libc, libm and libgcc_s (a closure beyond what nvidia-smi needs), that print the
command line they were given and exit 0. They prove where NVIDIA's consumers find them and that they run
from the published root; they implement nothing of IMEX. They are added to a hard-linked copy of Debian's
real 535.309.01 chroot (``cp -al``: the artefact itself is never written).

The command lines are NVIDIA's DRA driver's (kubernetes-sigs/dra-driver-nvidia-gpu 95932046):
``nvidia-imex -c /etc/nvidia-imex/imexd.cfg`` (cmd/compute-domain-daemon/main.go, run by name in the
compute-domain daemon's container, which gets the binary through the management-mode CDI spec of the
driver root, cmd/compute-domain-kubelet-plugin/cdi.go) and ``chroot <driver root> nvidia-imex-ctl -q
--u=<socket>`` (cmd/compute-domain-kubelet-plugin/nvlib.go ``checkHostIMEXReady``, host-managed IMEX).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from helpers.support import require

IMEX_BINARIES = ("nvidia-imex", "nvidia-imex-ctl")
DAEMON_ARGV = ("nvidia-imex", "-c", "/etc/nvidia-imex/imexd.cfg")
HOST_CHECK_ARGV = ("nvidia-imex-ctl", "-q", "--u=/etc/nvidia-imex/imex_ctrl.sock")
STAND_IN_NEEDS = ("libm.so.6", "libgcc_s.so.1", "libc.so.6")
_SOURCE = r"""
#include <math.h>
#include <stdio.h>
int main(int argc, char **argv) {
    printf("stand-in %s:", argv[0]);
    for (int i = 1; i < argc; i++) printf(" %s", argv[i]);
    printf("\nlibm sqrt(%d) = %.3f\n", argc, sqrt((double)argc)); /* a libm symbol: the loader found it */
    return 0;
}
"""


def build_stand_in(dest: Path) -> Path:
    """One stand-in executable at ``dest`` (module doc), DT_NEEDED exactly ``STAND_IN_NEEDS``."""
    require(shutil.which("gcc"), "gcc", how="apt-get install gcc (scripts/setup.sh)")
    source = dest.with_suffix(".c")
    source.write_text(_SOURCE)
    argv = ["gcc", "-O2", "-o", str(dest), str(source), "-Wl,--no-as-needed", "-lm", "-lgcc_s"]
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    source.unlink()
    return dest


def userspace_with_imex(source: Path, dest: Path) -> Path:
    """A hard-linked copy of the userspace ``source`` with stand-in IMEX binaries in usr/bin (a plain copy
    where ``dest`` is on another filesystem)."""
    if subprocess.run(["cp", "-al", str(source), str(dest)], capture_output=True, timeout=300, check=False).returncode:
        shutil.rmtree(dest, ignore_errors=True)
        subprocess.run(["cp", "-a", str(source), str(dest)], check=True, timeout=300)
    for name in IMEX_BINARIES:
        build_stand_in(dest / "usr/bin" / name)
    return dest
