"""A private containerd 2.x, the CDI consumer Talos runs, for the CDI tests (docs/operator.md).

containerd is Debian sid's package unpacked by scripts/fetch-containerd.sh into .cache/containerd (not
installed; the system's containerd, docker.io's 1.6, is left alone). It runs on its own socket, root and
state below the test's directory, without the CRI and NRI plugins (nothing here is a kubelet), in a mount
namespace of its own (``unshare -m --propagation slave``: mounts made on the host later still reach it)
where ``/usr/sbin`` is a directory the test controls. That directory holds bookworm's runc and, while the
test says so, a copy of the host's glibc ``ldconfig``: present, the node is a Talos node with Sidero's glibc
extension (the toolkit's ``update-ldcache`` hook runs ``/sbin/ldconfig``, and ``/sbin`` is ``usr/sbin`` here);
absent, one without it. Containers run through containerd's ``ctr``, whose ``run --device`` takes CDI
device names (Debian packages no nerdctl); its CDI registry reads /etc/cdi and /var/run/cdi.

The workload image is the suite's local ``debian:bookworm-slim`` (scripts/make-base-image.sh), taken from
the Docker engine with ``docker save`` and imported; it has no NVIDIA file of its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from helpers.support import REPO, require

CONTAINERD_BIN = Path(os.environ.get("CONTAINERD_DIR", REPO / ".cache" / "containerd")) / "usr/bin"
WORKLOAD_IMAGE = "debian:bookworm-slim"
NAMESPACE = "issue-29"
# containerd 2.x plugins a bare daemon does not need: CRI (a kubelet's API) and NRI (its own socket under /var/run).
DISABLED = (
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.images",
    "io.containerd.cri.v1.runtime",
    "io.containerd.nri.v1.nri",
    "io.containerd.podsandbox.controller.v1.podsandbox",
)


@dataclass
class Containerd:
    base: Path
    process: subprocess.Popen[bytes]

    @property
    def socket(self) -> Path:
        return self.base / "containerd.sock"

    @property
    def sbin(self) -> Path:
        return self.base / "sbin"

    @property
    def run_view(self) -> Path:
        """What ctr sees as ``/run``: ctr's static CDI registry reads only /etc/cdi and /var/run/cdi
        (containerd cmd/ctr/commands/run: ``cdi.Configure`` with its default spec dirs), so each ctr runs in a
        mount namespace of its own with this directory over ``/run``; the node's /run is never written."""
        return self.base / "run-view"

    @property
    def cdi_dir(self) -> Path:
        return self.run_view / "cdi"

    def host_ldconfig(self, present: bool) -> None:
        """The node's ``/sbin/ldconfig``: glibc's static one (Sidero's glibc extension) or none (base Talos)."""
        target = self.sbin / "ldconfig"
        if present:
            shutil.copy2("/usr/sbin/ldconfig", target)
        else:
            target.unlink(missing_ok=True)

    def ctr(self, *args: str, timeout: float = 120, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        ctr = [str(CONTAINERD_BIN / "ctr"), "--address", str(self.socket), "--namespace", NAMESPACE, *args]
        argv = ["unshare", "-m", "--propagation", "slave", "sh", "-c", 'mount --bind "$0" /run && exec "$@"']
        argv += [str(self.run_view), *ctr]
        if stdin is None:  # never the test's own stdin: a command reading it would hang
            return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
        return subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout, check=False)

    def run(self, device: str, name: str, script: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``sh -c script sh args...`` in a new container of the workload image with the CDI ``device``."""
        image = f"docker.io/library/{WORKLOAD_IMAGE}"
        # runc's state below this daemon's base (its default, /run/containerd/runc/<namespace>, is the node's).
        runc = ["--runc-root", str(self.base / "runc")]
        command = ["sh", "-c", script, "sh", *args]
        # its stdio FIFOs below this daemon's base too (ctr's default, /run/containerd/fifo, is the node's)
        fifo = ["--fifo-dir", str(self.base / "fifo")]
        argv = ["run", "--rm", *runc, *fifo, "--device", device, image, f"{name}-{os.getpid()}", *command]
        done = self.ctr(*argv, timeout=60)
        return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())

    def _shims(self) -> list[int]:
        """Pids of the runc shims this daemon started (they leave its session; their argv names its socket)."""
        found = []
        for entry in Path("/proc").iterdir():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if entry.name.isdigit() and str(self.socket).encode() in argv and b"-namespace" in argv:
                found.append(int(entry.name))
        return found

    def stop(self) -> None:
        """Kill what runs in its containers, then containerd, then any shim left (each by its pid)."""
        listed = self.ctr("tasks", "ls", "-q", timeout=30).stdout.decode().split()
        for task in listed:
            self.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", task, timeout=30)
            self.ctr("tasks", "delete", "--force", task, timeout=30)
            self.ctr("containers", "delete", task, timeout=30)
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # its own session: containerd and what it left
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        for pid in self._shims():
            os.kill(pid, signal.SIGKILL)


def require_containerd() -> None:
    require(os.geteuid() == 0, "root (containerd, mount namespaces)")
    require(
        (CONTAINERD_BIN / "ctr").is_file(),
        f"containerd 2.x at {CONTAINERD_BIN}",
        how="scripts/fetch-containerd.sh (scripts/setup.sh)",
    )
    require(shutil.which("runc"), "runc", how="apt-get install runc (a docker.io dependency)")
    require(shutil.which("docker"), "the docker CLI and engine (the workload image)", how="scripts/dockerd.sh start")


def start_containerd(base: Path) -> Containerd:
    """containerd on ``base``'s socket with the workload image imported; the host's ldconfig present."""
    require_containerd()
    sbin = base / "sbin"
    sbin.mkdir(parents=True)
    shutil.copy2(shutil.which("runc") or "runc", sbin / "runc")
    run_view = base / "run-view"  # Containerd.run_view
    (run_view / "cdi").mkdir(parents=True)
    config = base / "config.toml"
    config.write_text(
        f'version = 3\nroot = "{base / "root"}"\nstate = "{base / "state"}"\n'
        f"disabled_plugins = {list(DISABLED)!r}\n".replace("'", '"')
        + f'[grpc]\n  address = "{base / "containerd.sock"}"\n'
        f'[ttrpc]\n  address = "{base / "containerd.sock.ttrpc"}"\n'
    )
    env = {"PATH": f"{CONTAINERD_BIN}:/usr/sbin:/usr/bin:/sbin:/bin"}
    # The node's /run stays the node's: the shims' sockets go below the view's containerd/s (containerd puts
    # them under its fixed state directory /run/containerd, pkg/shim/util_unix.go), the view ctr sees too.
    setup = 'mount --bind "$0" /usr/sbin && mount --bind "$1" /run && shift && exec "$@"'
    argv = [
        "unshare",
        "-m",
        "--propagation",
        "slave",
        "sh",
        "-c",
        setup,
        str(sbin),
        str(run_view),
        str(CONTAINERD_BIN / "containerd"),
        "--config",
        str(config),
    ]
    with (base / "containerd.log").open("wb") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=log, start_new_session=True)
    daemon = Containerd(base, process)
    deadline = time.monotonic() + 30
    while daemon.ctr("version", timeout=10).returncode != 0:
        if time.monotonic() > deadline or process.poll() is not None:
            daemon.stop()
            raise AssertionError(f"containerd did not start: {(base / 'containerd.log').read_text()[-2000:]}")
        time.sleep(0.2)
    daemon.host_ldconfig(present=True)
    saved = subprocess.run(["docker", "save", WORKLOAD_IMAGE], capture_output=True, timeout=120, check=False)
    require(saved.returncode == 0, f"image {WORKLOAD_IMAGE} in the Docker engine", how="scripts/make-base-image.sh")
    imported = daemon.ctr("images", "import", "-", stdin=saved.stdout, timeout=300)
    assert imported.returncode == 0, imported.stderr.decode()
    return daemon
