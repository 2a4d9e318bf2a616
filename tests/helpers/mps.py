"""The two MPS control daemons gpu-operator's consumers start from a driver root, run against a published root
(docs/mps.md; tests/integration/test_mps_real.py).

Each flow runs as PID 1 of its own PID and mount namespace (``run_flow``: ``unshare -m -p -f --mount-proc
--kill-child``), so every mount it makes is private and every process it starts, daemons included, dies
with it, even when the test's timeout kills it; with ``host_pid`` in a mount namespace of its own only,
inside a PID namespace its caller made (tests/helpers/procsys.py). Inside, ``python -m helpers.mps FLOW
ROOT WORK`` prints what happened as JSON (``FlowResult``); nothing is asserted there.

- ``dra``: NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu @95932046). The kubelet plugin makes
  the claim's pipe, shm (a tmpfs) and log directories and picks where the shm goes in the daemon's pod:
  ``<driver root>/dev/shm`` when that exists, else the pod's ``/dev/shm`` (cmd/gpu-kubelet-plugin/sharing.go
  ``Start``, ``setMpsShmMountPath``). The pod (templates/mps-control-daemon.tmpl.yaml) mounts the driver
  root at /driver-root (here: the root itself) with the pipe and log directories at its tmp/nvidia-mps and
  var/log/nvidia-mps (runc makes those mount points inside the root, as here), then runs its script: with
  an executable bin/sh or usr/bin/sh in the root, each command as ``chroot /driver-root sh -c CMD``, else
  ``sh -c CMD`` with the root's usr/bin first on PATH, its LD_LIBRARY_PATH and CUDA_MPS_* variables; the
  environment is the image's PATH (gcr.io/distroless/cc:debug: GoogleContainerTools/distroless
  static/static.bzl @cd080764) and CUDA_VISIBLE_DEVICES. The test machine's sh and chroot stand in for the
  image's busybox.
- ``plugin``: the device plugin's MPS mode (NVIDIA/k8s-device-plugin v0.20.0, cmd/mps-control-daemon/mps
  daemon.go ``Start``/``EchoPipeToControl``/``Stop``; gpu-operator a22dbf67
  assets/state-mps-control-daemon/0400_daemonset.yaml): ``nvidia-cuda-mps-control -d`` in its container with
  ONLY ``CUDA_MPS_PIPE_DIRECTORY=/mps/<resource>/pipe`` and ``CUDA_MPS_LOG_DIRECTORY=/mps/<resource>/log``,
  then the thread percentage and ``quit`` written to ``nvidia-cuda-mps-control`` (no newline, as Go writes
  it); /mps is the host's /run/nvidia/mps, /dev/shm its shm tmpfs (``mount-shm``). The container gets the
  binaries and libcuda through the root's management CDI spec, at the root's own paths (asserted by the
  test), so its image is stood in for by an overlay of the published root: the root's libc and ld.so.cache
  serve where the image's libc and the spec's ldconfig hook would.

Without a GPU no CUDA client can connect, so a ``start_server -uid 0`` control command stands in for the
first client: the daemon starts ``nvidia-cuda-mps-server``, which loads libcuda.so.1 and logs the driver's
"no CUDA-capable device" error. ``quit`` ends the daemon; the flow then waits (bounded) until no
nvidia-cuda-mps process is left, reaping the orphans it inherits as PID 1 (or as their subreaper).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from helpers.support import REPO, require

DISTROLESS_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/busybox"
GPU_UUID = "GPU-11111111-2222-3333-4444-555555555555"  # CUDA_VISIBLE_DEVICES: the claim's GPUs
RESOURCE = "nvidia.com/gpu"
CLIENT = "start_server -uid 0"
NO_GPU = "no CUDA-capable device is detected"
WAIT_S = 20.0
_BASIC_NODES = {"null": (1, 3), "zero": (1, 5), "urandom": (1, 9), "tty": (5, 0)}


def run_flow(flow: str, root: Path, work: Path, *, host_pid: bool = False, timeout: float = 120) -> dict[str, Any]:
    """``flow`` against ``root`` in a private PID and mount namespace; what it saw, as a dict. ``host_pid``:
    a private mount namespace only, in the caller's PID namespace, as the DRA driver's MPS pod runs
    (``hostPID: true``, like the driver pod whose procfs it then finds in the root); the caller runs it
    inside a PID namespace of its own (tests/helpers/procsys.py), so no daemon outlives that."""
    require(os.geteuid() == 0, "root (unshare, mount, chroot)")
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])}
    spaces = ["-m", "--propagation", "private"] if host_pid else ["-m", "-p", "-f", "--mount-proc", "--kill-child"]
    argv = ["unshare", *spaces, sys.executable, "-m", "helpers.mps", flow, str(root), str(work)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# ---- inside the namespace ------------------------------------------------------------------------------


def _sh(*argv: str | Path) -> None:
    subprocess.run([str(a) for a in argv], check=True, capture_output=True, timeout=30)


def _mount_dev(dev: Path) -> None:
    """A container's own /dev: a tmpfs with the basic nodes (whatever libcuda makes there is thrown away)."""
    dev.mkdir(exist_ok=True)
    _sh("mount", "-t", "tmpfs", "-o", "mode=755,nosuid", "tmpfs", dev)
    for name, (major, minor) in _BASIC_NODES.items():
        os.mknod(dev / name, 0o20666, os.makedev(major, minor))
        os.chmod(dev / name, 0o666)


def _bind(source: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)  # as runc makes a missing mount point
    _sh("mount", "--bind", source, target)


def _run(argv: list[str], env: dict[str, str], stdin: str = "") -> dict[str, Any]:
    done = subprocess.run(argv, input=stdin, env=env, capture_output=True, text=True, timeout=WAIT_S, check=False)
    return {"rc": done.returncode, "out": done.stdout, "err": done.stderr}


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def _wait_for_server(log_dir: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and "exited with status" not in _read(log_dir / "control.log"):
        time.sleep(0.1)


def _mps_processes() -> list[str]:
    """nvidia-cuda-mps-* processes still alive in this PID namespace (orphans reaped first)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    left = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            comm = _read(entry / "comm").strip()
            if comm.startswith("nvidia-cuda-mps"):
                left.append(f"{entry.name} {comm}")
    return left


def _wait_until_gone() -> list[str]:
    deadline = time.monotonic() + WAIT_S
    while (left := _mps_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def dra(root: Path, work: Path) -> dict[str, Any]:
    claim = work / "plugin" / "mps" / "claim"
    pipe, shm, log = claim / "pipe", claim / "shm", claim / "log"
    for d in (pipe, shm, log):
        d.mkdir(parents=True, mode=0o755)
    _sh("mount", "-t", "tmpfs", "-o", "rw,nosuid,nodev,noexec,relatime,size=65536k", "shm", shm)
    _mount_dev(Path("/dev"))  # the pod's own /dev
    shm_target = root / "dev/shm" if (root / "dev/shm").exists() else Path("/dev/shm")  # setMpsShmMountPath
    _bind(shm, shm_target)
    _bind(pipe, root / "tmp/nvidia-mps")
    _bind(log, root / "var/log/nvidia-mps")
    env = {"PATH": DISTROLESS_PATH, "CUDA_VISIBLE_DEVICES": GPU_UUID}
    if os.access(root / "bin/sh", os.X_OK) or os.access(root / "usr/bin/sh", os.X_OK):
        branch, run = "chroot", ["chroot", str(root), "sh", "-c"]
    else:
        branch, run = "direct", ["sh", "-c"]
        env["PATH"] = f"{root}/usr/bin:{root}/bin:{root}/usr/local/bin:{env['PATH']}"
        env["LD_LIBRARY_PATH"] = f"{root}/lib64:{root}/lib:{root}/usr/lib64:{root}/usr/lib"
        env["CUDA_MPS_PIPE_DIRECTORY"] = f"{root}/tmp/nvidia-mps"
        env["CUDA_MPS_LOG_DIRECTORY"] = f"{root}/var/log/nvidia-mps"
    start = _run([*run, "nvidia-cuda-mps-control -d"], env)
    client = _run([*run, "nvidia-cuda-mps-control"], env, CLIENT)
    _wait_for_server(log)
    # The daemon's /dev/shm must be the claim's shm directory, which the plugin's CDI edits give the workload.
    probe = _run([*run, ": > /dev/shm/probe-from-the-daemon"], env)
    quit_ = _run([*run, "nvidia-cuda-mps-control"], env, "quit")
    left = _wait_until_gone()  # first: the daemon logs its last commands as it ends
    return {
        "branch": branch,
        "start": start,
        "client": client,
        "quit": quit_,
        "probe": probe,
        "shm_shared": (shm / "probe-from-the-daemon").exists(),
        "control_log": _read(log / "control.log"),
        "server_log": _read(log / "server.log"),
        "left": left,
    }


def plugin(root: Path, work: Path) -> dict[str, Any]:
    host_mps = work / "run-nvidia-mps"  # hostPath /run/nvidia/mps, DirectoryOrCreate
    (host_mps / "shm").mkdir(parents=True)
    _sh("mount", "-t", "tmpfs", "-o", "rw,nosuid,nodev,noexec,relatime,size=65536k", "shm", host_mps / "shm")
    ctr, upper, scratch = work / "ctr", work / "upper", work / "overlay-work"
    for d in (ctr, upper, scratch):
        d.mkdir()
    _sh("mount", "-t", "overlay", "-o", f"lowerdir={root},upperdir={upper},workdir={scratch}", "overlay", ctr)
    _mount_dev(ctr / "dev")
    _bind(host_mps / "shm", ctr / "dev/shm")
    _bind(host_mps, ctr / "mps")
    (ctr / "proc").mkdir(exist_ok=True)
    _sh("mount", "-t", "proc", "proc", ctr / "proc")
    pipe, log = f"/mps/{RESOURCE}/pipe", f"/mps/{RESOURCE}/log"
    for inner in (pipe, log):
        (ctr / inner.lstrip("/")).mkdir(parents=True, mode=0o755)
    env = {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": log}  # Daemon.EnvVars, nothing else
    chroot = shutil.which("chroot") or "chroot"  # found on our PATH: the daemon's environment has none
    control = [chroot, str(ctr), "/usr/bin/nvidia-cuda-mps-control"]  # exec.LookPath in the image's PATH
    start = _run([*control, "-d"], env)
    threads = _run(control, env, "set_default_active_thread_percentage 50")  # two replicas of one GPU
    client = _run(control, env, CLIENT)
    _wait_for_server(ctr / log.lstrip("/"))
    healthy = _run(control, env, "get_default_active_thread_percentage")  # AssertHealthy
    quit_ = _run(control, env, "quit")
    left = _wait_until_gone()  # first: the daemon logs its last commands as it ends
    logs = ctr / log.lstrip("/")
    return {
        "start": start,
        "threads": threads,
        "client": client,
        "healthy": healthy,
        "quit": quit_,
        "control_log": _read(logs / "control.log"),
        "server_log": _read(logs / "server.log"),
        "left": left,
    }


def _reap_orphans() -> None:
    """Become the reaper of the daemons this flow starts (PR_SET_CHILD_SUBREAPER, prctl(2)): as PID 1 of its
    own namespace it is one anyway; in the caller's (``host_pid``) the daemonized control daemon would
    otherwise be reparented out of reach and stay a zombie that ``_mps_processes`` counts."""
    import ctypes  # only here: the flows alone need it

    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(36, 1, 0, 0, 0) == 0, os.strerror(ctypes.get_errno())  # PR_SET_CHILD_SUBREAPER


if __name__ == "__main__":
    _reap_orphans()
    flow, root_arg, work_arg = sys.argv[1:4]
    outcome = {"dra": dra, "plugin": plugin}[flow](Path(root_arg), Path(work_arg))
    print(json.dumps(outcome))
