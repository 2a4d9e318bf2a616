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

1. ``init``: the first ``init --no-wait`` (init's tmpfs, the publish, a read-only sysfs; no procfs).
2. ``consumer``: the root as a consumer with a readOnly hostPath gets it (``consumer_view``).
3. ``dra``: the DRA flow on that root.
4. ``legacy``: the read-write procfs earlier versions of init mounted in the root, and the consumer's view
   of that (``consumer_legacy``: the attack, so the probe is seen to catch it).
5. ``restart``: ``init --no-wait`` again, which unmounts it.
6. ``optin``: ``init --no-wait`` with ``DRIVER_ROOT_PROCFS=mps-minimal`` (its procfs), the consumer's view of
   it (``consumer_optin``), the DRA flow on it (``dra_optin``), the same ``init`` again (``optin_restart``)
   and one without the setting (``optout``), which unmounts it.
After each ``init``: the mounts below BASE in this namespace (``mounts_*``).
"""

from __future__ import annotations

import errno
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
# The procfs earlier versions of init mounted at the root's proc (driverroot/procsys.py).
LEGACY = (("proc", "proc", "nosuid,nodev,noexec", "nvidia-driver-proc"),)
NOBODY = 65534  # a consumer's uid without a capability


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
        {
            "point": m.mount_point,
            "fstype": m.fstype,
            "source": m.source,
            "options": ",".join(m.options),
            "super": ",".join(m.super_options),
        }
        for m in parse_mountinfo(text)
        if m.mount_point == top or m.mount_point.startswith(top + "/")
    ]


# ---- inside the namespace ------------------------------------------------------------------------------


def _init(env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [str(CLI), "init", "--no-wait"], env=env, capture_output=True, text=True, check=False, timeout=300, cwd=REPO
    )
    return {"rc": done.returncode, "log": done.stderr}


def consumer_view(root: Path, point: Path) -> dict[str, Any]:
    """What a consumer given the root as a readOnly hostPath finds: a recursive bind made read-only at its
    top only (containerd binds with ``rbind``, then runc remounts ``bind,ro`` the top mount alone). Opens
    proc/sys/kernel/core_pattern for writing and closes it without writing a byte: the open alone says
    whether a write would be let through."""
    point.mkdir()
    subprocess.run(["mount", "--rbind", str(root), str(point)], check=True)
    # A container's hostPath without mountPropagation: rprivate (so unmounting it leaves the root's own alone).
    subprocess.run(["mount", "--make-rprivate", str(point)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(point)], check=True)
    try:
        fd = os.open(point / "proc/sys/kernel/core_pattern", os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        core_pattern = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    else:
        os.close(fd)
        core_pattern = "opened for writing"
    proc = point / "proc"
    pids = [e for e in os.listdir(proc) if e.isdigit()] if proc.is_dir() else []
    fd = os.open(proc, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        foreign = _foreign_pids(fd, NOBODY)
    finally:
        os.close(fd)
    seen = mounts_below(point)
    subprocess.run(["umount", "-R", str(point)], check=True)
    point.rmdir()
    return {"core_pattern": core_pattern, "pids": len(pids), "foreign_pids": foreign, "mounts": seen}


def _foreign_pids(proc_fd: int, uid: int) -> int:
    """How many pid directories other than its own a process of ``uid`` (no capability, no group) lists in
    the procfs open at ``proc_fd`` (the temporary directory above it is root's alone: it lists through the
    descriptor its parent opened)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child ends in os._exit, whatever happens
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            own = str(os.getpid())
            os.write(write, str(sum(e.isdigit() and e != own for e in os.listdir(proc_fd))).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read()
    os.waitpid(child, 0)
    return int(answer) if answer else -1


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
    out["consumer"] = consumer_view(root, base / "consumer")
    out["dra"] = run_flow("dra", root, base / "work-dra", host_pid=True)
    for point, fstype, options, source in LEGACY:  # what earlier versions of init mounted there (if not there)
        subprocess.run(["mount", "-t", fstype, "-o", options, source, str(root / point)], check=False)
    out["mounts_legacy"] = mounts_below(base)
    out["consumer_legacy"] = consumer_view(root, base / "consumer")
    out["restart"], out["mounts_restart"] = _init(env), mounts_below(base)
    optin = env | {"DRIVER_ROOT_PROCFS": "mps-minimal"}
    out["optin"], out["mounts_optin"] = _init(optin), mounts_below(base)
    out["consumer_optin"] = consumer_view(root, base / "consumer")
    out["dra_optin"] = run_flow("dra", root, base / "work-dra-optin", host_pid=True)
    out["optin_restart"], out["mounts_optin_restart"] = _init(optin), mounts_below(base)
    out["optout"], out["mounts_optout"] = _init(env), mounts_below(base)
    return out


if __name__ == "__main__":
    print(json.dumps(node(sys.argv[1], Path(sys.argv[2]))))
