"""``init --no-wait`` for real on a Talos-like node in a private mount namespace, then NVIDIA's DRA driver's MPS
flow against the root it published (docs/publish.md; tests/integration/test_procsys_real.py).

``run_node`` starts ``python -m helpers.procsys USERSPACE BASE`` as PID 1 of a PID and mount namespace of its
own (``unshare -m -p -f --mount-proc --kill-child --propagation private``): every mount made inside (the
node's /run, init's tmpfs, procfs and sysfs) and every process (the MPS daemons) lives in them and dies
with them, so the machine keeps none, even when the test's timeout kills it. That PID namespace is the
node's: ``init`` runs in it, as gpu-operator's driver pod runs with ``hostPID: true``, and so does the
DRA flow (helpers/mps.py ``host_pid``), as the DRA driver's MPS pod does (``hostPID: true``,
kubernetes-sigs/dra-driver-nvidia-gpu templates/mps-control-daemon.tmpl.yaml @95932046). That matters:
libcuda names its threads through /proc/self/task/<its tid>/comm, a tid that exists only in a procfs of
its own PID namespace.

Inside, the steps below run in order and what each saw is printed as JSON (``NodeRun``); nothing is
asserted there. The node: a tmpfs mounted with Talos's /run flags and shared (helpers/mounts.py,
siderolabs/talos ``PseudoLate``), RUN_DIR its nvidia/ directory, the Talos 1.11 host re-stamped for the
userspace (helpers/published_roots.py).

1. ``init``: the first ``init --no-wait`` (init's tmpfs, the publish, proc and sys).
2. ``dra``: the DRA flow on that root.
3. ``restart``: ``init --no-wait`` again.
4. ``dra_without``: the DRA flow after proc and sys are unmounted (init's step undone).
5. ``repair``: ``init --no-wait`` again, which mounts them back.
After each ``init``: the mounts below BASE in this namespace (``mounts_*``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from driver_container.formats.kernel.mountinfo import parse_mountinfo
from helpers.fakes import node_env
from helpers.mounts import TALOS_RUN_OPTIONS
from helpers.mps import run_flow
from helpers.published_roots import CLI, GRAPHICS, restamp_host, userspace_root
from helpers.support import REPO, require

NodeRun = dict[str, Any]


def run_node(userspace: str, base: Path, timeout: float = 400) -> NodeRun:
    """The steps above for the graphics userspace named ``userspace``, below ``base``."""
    require(os.geteuid() == 0, "root (unshare, mount, chroot)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])}
    argv = [
        "unshare",
        "-m",
        "-p",
        "-f",
        "--mount-proc",
        "--kill-child",
        "--propagation",
        "private",
        sys.executable,
        "-m",
        "helpers.procsys",
        userspace,
        str(base),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    result: NodeRun = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def mounts_below(base: Path) -> list[dict[str, str]]:
    """The mounts at or below ``base`` in this mount namespace, in mount order."""
    text = Path("/proc/self/mountinfo").read_text()
    top = str(base)
    return [
        {"point": m.mount_point, "fstype": m.fstype, "source": m.source, "options": ",".join(m.options)}
        for m in parse_mountinfo(text)
        if m.mount_point == top or m.mount_point.startswith(top + "/")
    ]


# ---- inside the namespace ------------------------------------------------------------------------------


def _init(env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [str(CLI), "init", "--no-wait"], env=env, capture_output=True, text=True, check=False, timeout=300, cwd=REPO
    )
    return {"rc": done.returncode, "log": done.stderr}


def node(name: str, base: Path) -> NodeRun:
    userspace = next(u for u in GRAPHICS if u.name == name)
    run_fs = base / "run"
    run_fs.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", TALOS_RUN_OPTIONS, "talos-run", str(run_fs)], check=True)
    subprocess.run(["mount", "--make-shared", str(run_fs)], check=True)
    host = restamp_host(base / "host", userspace.version, userspace.arch)
    env = node_env(host, userspace_root(userspace, base), run_fs / "nvidia")
    root = run_fs / "nvidia/driver"
    out: NodeRun = {"init": _init(env), "mounts_init": mounts_below(base)}
    out["dra"] = run_flow("dra", root, base / "work-dra", host_pid=True)
    out["restart"], out["mounts_restart"] = _init(env), mounts_below(base)
    for point in (root / "proc", root / "sys"):
        subprocess.run(["umount", str(point)], check=False, capture_output=True)  # the test checks what is left
    out["mounts_without"] = mounts_below(base)
    out["dra_without"] = run_flow("dra", root, base / "work-without", host_pid=True)
    out["repair"], out["mounts_repair"] = _init(env), mounts_below(base)
    return out


if __name__ == "__main__":
    print(json.dumps(node(sys.argv[1], Path(sys.argv[2]))))
