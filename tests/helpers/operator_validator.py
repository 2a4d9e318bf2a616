"""gpu-operator v26.7.0's driver startup probe and its real ``nvidia-validator --component driver`` run against
a published driver root, without a GPU and without a cluster (tests/integration/test_operator_validator.py).

NVIDIA's binaries stay outside the project: GPU_OPERATOR_TOOLS_DIR, default
``<repo>/../shared/tools/gpu-operator-v26.7.0`` (its README: NVIDIA/gpu-operator tag v26.7.0, commit
10ee5b3638b89e11e949412aafa5ba99279c3721, ``./cmd/nvidia-validator`` built unmodified, CGO off, static).
Nothing here models them: the probe script is the operator's own (the ``startup-probe.sh`` key of
``assets/state-driver/0400_configmap.yaml``, or of a rendered ``nvidia-driver-startup-probe`` ConfigMap) and
the validator is the binary itself; only what they reach outside the root is stood in for.

The validator's driver flow, read at NVIDIA/gpu-operator @10ee5b36 (cmd/nvidia-validator/main.go unless
named otherwise):

1. ``start``: ``mkdir --output-dir`` (default /run/nvidia/validations); ``validateComponent("driver")`` ->
   ``Driver.validate``: delete ``<output-dir>/driver-ready``, then ``Driver.runValidation``.
2. ``validateHostDriver``: ``/host/usr/lib/wsl/lib/nvidia-smi`` (WSL), else ``resolveHostNvidiaSMI("/host")``
   opens /usr/bin, /usr/sbin, /bin, /sbin, /usr/lib/wsl/lib, /opt/bin ``nvidia-smi`` inside /host
   (pathrs ``OpenInRoot``: a non-empty executable regular file) and runs ``chroot /host <it>``. None on a
   Talos host: "No pre-installed driver detected on the host".
3. ``isDriverManagedByOperator``: ``rest.InClusterConfig`` (vendor/k8s.io/client-go/rest/config.go: env
   KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the token
   /var/run/secrets/kubernetes.io/serviceaccount/token, the CA ``ca.crt`` beside it, always https), then ONE
   request: ``GET /apis/apps/v1/namespaces/<OPERATOR_NAMESPACE>/daemonsets?labelSelector=
   app.kubernetes.io/component=nvidia-driver`` (all namespaces, ``/apis/apps/v1/daemonsets``, when
   OPERATOR_NAMESPACE is empty). True when one listed DaemonSet's controller owner has an ``apiVersion``
   starting ``nvidia.com/`` and kind ClusterPolicy or NVIDIADriver. An error (no in-cluster config, a 404)
   ends the run (exit 1); an empty list means "not managed": steps 4 and 6 are skipped.
4. ``validateDriverContainer`` -> ``assertDriverContainerReady``: ``sh -c "stat
   /run/nvidia/validations/.driver-ctr-ready"`` (a fixed path, not --output-dir), retried by
   ``runCommandWithWait`` while WITH_WAIT is true.
5. ``validateDriver`` (same function): ``driver.Root(--driver-install-dir-ctr-path)`` (internal/driver/root.go,
   default /run/nvidia/driver) ``GetDriverLibraryPath`` finds ``libnvidia-ml.so.1`` in the root's /, /usr/lib64,
   /usr/lib/{x86_64,aarch64}-linux-gnu, /lib64, /lib/{x86_64,aarch64}-linux-gnu and ``GetNvidiaSMIPath``
   ``nvidia-smi`` in its /, /usr/bin, /usr/sbin, /bin, /sbin (each through ``filepath.EvalSymlinks``: an
   absolute link resolves in the validator's own filesystem); runs that nvidia-smi with
   ``LD_PRELOAD=<resolved libnvidia-ml>``, retried every SLEEP_INTERVAL_SECONDS while WITH_WAIT.
6. ``validateAdditionalDriverComponents``: reads ``.driver-ctr-ready`` as YAML into ``map[string]bool``
   (github.com/stretchr/testify/assert/yaml = gopkg.in/yaml.v3); for each TRUE key, in Go's random map order:
   GDRCOPY_ENABLED -> ``GDRCopy.validate``, GDS_ENABLED -> ``NvidiaFs.validate``, GPU_DIRECT_RDMA_ENABLED ->
   ``NvidiaPeermem.validate``. Each deletes and, once its check passes, creates ``gdrcopy-ready``,
   ``nvidia-fs-ready`` or ``nvidia-peermem-ready`` in --output-dir. The check is a SHELL PIPELINE, not a read
   of /proc/modules by the validator: ``sh -c "lsmod | grep -E '^gdrdrv\\s'"`` (``GDRCopy.runValidation``),
   ``sh -c "lsmod | grep nvidia_fs"`` (``NvidiaFs.runValidation``, unanchored),
   ``sh -c "lsmod | grep -E '^nvidia_peermem\\s'"`` (``NvidiaPeermem.runValidation``), under
   ``runCommandWithWait``: with WITH_WAIT (the DaemonSet sets it) it prints "running command sh with args
   [...]" and, on failure, "command failed, retrying after N seconds", FOREVER: no bound, no give-up.
7. ``createDevCharSymlinks``: ``isNvidiaModuleLoaded`` (``/sys/module/nvidia/refcnt`` exists; else, when the
   dev root is the driver root, nvidia-ctk's ``nvmodules`` would ``chroot <root> modprobe``); then the vendored
   toolkit's create-dev-char-symlinks (vendor/github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk/system/
   create-dev-char-symlinks ``NewSymlinkCreator``/``CreateLinks``, all.go ``newAllPossible``): majors from
   /proc/devices (no ``nvidia`` major is an error), mknod of nvidiactl, nvidia-modeset, nvidia-uvm(-tools) in
   ``<dev root>/dev`` where missing (pkg/system/nvdevices), the GPUs from ``<dev root>/sys/bus/pci/devices``
   (go-nvlib nvpci: a missing directory is an error), links ``/host-dev-char/<major>:<minor>``.
   ``getDriverInfo`` (cmd/nvidia-validator/driver.go): the dev root is the driver root when it has a ``dev``
   directory, else the host root.
8. ``Driver.createStatusFile``: ``<output-dir>/driver-ready`` = IS_HOST_DRIVER, NVIDIA_DRIVER_ROOT,
   DRIVER_ROOT_CTR_PATH, NVIDIA_DEV_ROOT, DEV_ROOT_CTR_PATH (internal/utils ``WriteFileAtomically``).

So loaded modules are checked by whatever ``lsmod`` the validator's PATH finds. In the v26.7.0 image
(docker/Dockerfile: nvcr.io/nvidia/distroless/cc plus Debian's busybox-static installed as /busybox/*, /bin/sh
-> /busybox/sh, PATH ending in /busybox) that is busybox's lsmod, which reads /proc/modules. Here the
validator runs in a root laid out the same way, with Debian's static busybox (``busybox_binary``) as
/busybox/*, and the test's module list is that root's /proc/modules: the real lsmod and grep read it, nothing
of the validator's pipeline is replaced.

Each run is a private mount namespace (``unshare -m``, util-linux makes its mounts private) that builds a
root in the test's work directory and chroots into it, so nothing is mounted or created outside that
directory and every mount ends with the namespace:

- validator root (the validator DaemonSet's driver-validation init container,
  assets/state-operator-validation/0500_daemonset.yaml): the driver root at /run/nvidia/driver (read-only
  unless asked: the published roots are shared by a session), the validations directory at
  /run/nvidia/validations, the host at /host (read-only), a plain directory at /host-dev-char, a /proc whose
  ``modules`` is the test's list and ``devices`` the fixture host's (every other entry links into a fresh
  procfs: ``_proc_view``), the fixture host's sysfs tree at /sys, a throw-away tmpfs /dev, the
  service-account token and CA. When the driver root's ``sys`` holds no sysfs (a publish outside a
  privileged pod), this machine's sysfs is mounted there read-only, as ``init`` mounts one on a node
  (docs/mps.md): the validator reads ``<root>/sys/bus/pci/devices`` (step 7) and exits 1 where
  that is missing (``root_sysfs=False``, or a root without a ``sys`` directory, such as one published
  without a shell). Environment: the image's PATH and NVIDIA_VISIBLE_DEVICES=void, the DaemonSet's
  WITH_WAIT=true, COMPONENT=driver, OPERATOR_NAMESPACE, the kubelet's KUBERNETES_SERVICE_*, and
  SLEEP_INTERVAL_SECONDS=1 (the validator's own flag; default 5) so a run needs seconds.
- probe root (the driver container: a Debian bookworm image, whose ``sh`` is dash, as this machine's): this
  machine's /usr read-only (and its /bin, /lib... links), the script at /usr/local/bin/startup-probe.sh, run
  as the kubelet's exec probe does, ``sh /usr/local/bin/startup-probe.sh``, with the DaemonSet's env, the
  fixture sysfs tree at /sys and the validations directory at /run/nvidia/validations.

``nvidia-smi`` is a STAND-IN in both (there is no GPU here): a shell script that prints that it is one,
records its arguments and LD_PRELOAD, and exits with the code the test gives. For the validator it is bound
over the nvidia-smi the validator resolves in the root, so the real root's libnvidia-ml is still what
``GetDriverLibraryPath`` finds. The Kubernetes API is ``OperatorApi``: https on 127.0.0.1 (a thread, a
self-signed certificate made by openssl), answering only the DaemonSet list of step 3 and recording every
request; anything else gets 404. client-go asks ``Accept: application/vnd.kubernetes.protobuf,application/json``
and takes the JSON it is given. (tests/integration/test_manager_api.py's server is local to that test module and
speaks plain http to our own client; this one follows its idiom: ThreadingHTTPServer, daemon threads, openssl.)

A validator run is bounded: after ``timeout`` seconds the namespace's process group is killed and the result
says ``stalled`` with what the validator was waiting for (``waiting_for``, its own "running command" line).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import yaml

from helpers.support import ARTEFACTS, REPO, require
from helpers.tls import EC_KEY, answer_json, self_signed

GPU_OPERATOR_VERSION = "v26.7.0"
GPU_OPERATOR_COMMIT = "10ee5b3638b89e11e949412aafa5ba99279c3721"
TOOLS_DIR = Path(
    os.environ.get("GPU_OPERATOR_TOOLS_DIR", REPO.parent / "shared/tools" / f"gpu-operator-{GPU_OPERATOR_VERSION}")
)
PROBE_CONFIGMAP = Path("assets/state-driver/0400_configmap.yaml")
PROBE_KEY = "startup-probe.sh"
NAMESPACE = "gpu-operator"
COMPONENT_LABEL = "app.kubernetes.io/component"  # main.go appComponentLabelKey
DRIVER_CTR_READY = ".driver-ctr-ready"
FLAGS = ("GDRCOPY_ENABLED", "GDS_ENABLED", "GPU_DIRECT_RDMA_ENABLED")
# Each .driver-ctr-ready flag, the module its validation waits for, and the file it writes (main.go
# validateAdditionalDriverComponents, GDRCopy/NvidiaFs/NvidiaPeermem validate and runValidation).
FLAG_MODULES = {"GDRCOPY_ENABLED": "gdrdrv", "GDS_ENABLED": "nvidia_fs", "GPU_DIRECT_RDMA_ENABLED": "nvidia_peermem"}
FLAG_STATUS_FILES = {
    "GDRCOPY_ENABLED": "gdrcopy-ready",
    "GDS_ENABLED": "nvidia-fs-ready",
    "GPU_DIRECT_RDMA_ENABLED": "nvidia-peermem-ready",
}
SLEEP_INTERVAL_S = 1  # SLEEP_INTERVAL_SECONDS for the validator (its default is 5)
# The images' PATHs: the validator's (docker/Dockerfile ENV) and Debian's default, the driver image's.
VALIDATOR_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/busybox"
DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CTR_DRIVER_ROOT = "/run/nvidia/driver"  # main.go defaultDriverInstallDirCtrPath
SERVICE_ACCOUNT = "var/run/secrets/kubernetes.io/serviceaccount"
STAND_IN = "stand-in nvidia-smi (no GPU on this machine)"
_READY_MARK = "--- sandbox ready ---"
# Character devices (major, minor) of a minimal /dev, as helpers.nvidia_sandbox makes it.
_BASIC_NODES = {"null": (1, 3), "zero": (1, 5), "urandom": (1, 9), "tty": (5, 0)}
# internal/driver/root.go: where the validator looks for nvidia-smi in the root, in order.
_SMI_DIRS = ("", "usr/bin", "usr/sbin", "bin", "sbin")
_WAITING = re.compile(r"^running command (\S+) with args \[(.*)\]$")


# ---- NVIDIA's files --------------------------------------------------------------------------------------


@functools.cache
def require_validator() -> Path:
    """The real ``nvidia-validator`` v26.7.0 (its ``--version`` names the version and commit), with the
    machine's prerequisites for running it here: root, unshare, mount, chroot."""
    validator = TOOLS_DIR / "nvidia-validator"
    require(
        os.access(validator, os.X_OK),
        f"gpu-operator {GPU_OPERATOR_VERSION} nvidia-validator in {TOOLS_DIR}",
        how="set GPU_OPERATOR_TOOLS_DIR to the directory its README describes",
    )
    done = subprocess.run([str(validator), "--version"], capture_output=True, text=True, timeout=30, check=False)
    version = done.stdout + done.stderr
    require(
        f"{GPU_OPERATOR_VERSION}, commit: {GPU_OPERATOR_COMMIT[:9]}" in version,
        f"nvidia-validator {GPU_OPERATOR_VERSION} (got {version.strip()!r})",
    )
    _require_sandbox()
    return validator


def _require_sandbox() -> None:
    require(os.geteuid() == 0, "root (unshare -m, mount, chroot)")
    for tool in ("unshare", "mount", "chroot", "env"):
        require(shutil.which(tool), f"{tool}(8) (util-linux / coreutils)", how="apt-get install util-linux coreutils")


@functools.cache
def busybox_binary() -> Path:
    """A static busybox for the validator's root, as the v26.7.0 image has Debian's busybox-static at
    /busybox: BUSYBOX, else busybox on PATH, else the one in a Debian userspace artefact (scripts/setup.sh)."""
    candidates = [os.environ.get("BUSYBOX", ""), shutil.which("busybox") or ""]
    graphics = ("debian-nvidia-535-graphics", "debian-nvidia-550-graphics", "debian-nvidia-555-graphics")
    candidates += [str(ARTEFACTS / name / "usr/bin/busybox") for name in graphics]
    found = next((Path(c) for c in candidates if c and os.access(c, os.X_OK)), None)
    how = "set BUSYBOX, apt-get install busybox-static, or scripts/setup.sh (Debian userspace artefacts)"
    require(found, "a static busybox (Debian busybox-static)", how=how)
    assert found is not None
    return found


def probe_script_from_assets() -> str:
    """``startup-probe.sh`` of the operator's ``assets/state-driver/0400_configmap.yaml`` (the ClusterPolicy path's
    ConfigMap ``nvidia-driver-startup-probe``)."""
    path = TOOLS_DIR / PROBE_CONFIGMAP
    require(
        path.is_file(),
        f"gpu-operator {GPU_OPERATOR_VERSION} assets in {TOOLS_DIR}",
        how="set GPU_OPERATOR_TOOLS_DIR to the directory its README describes",
    )
    config = yaml.safe_load(path.read_text())
    return str(config["data"][PROBE_KEY])


def probe_script_from_rendered(objects: Iterable[Mapping[str, Any]]) -> str:
    """``startup-probe.sh`` of the ``nvidia-driver-startup-probe`` ConfigMap among ``render-driver --out`` objects."""
    name = "nvidia-driver-startup-probe"
    config = next(o for o in objects if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == name)
    return str(config["data"][PROBE_KEY])


# ---- node files --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeFiles:
    """What the node shows a pod outside the driver root: the host root (/host), a sysfs tree (/sys, for
    /sys/module/nvidia/refcnt) and /proc/devices (device majors)."""

    host_root: Path
    sys_root: Path
    proc_devices: Path

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> NodeFiles:
        """The fixture host of an ``nvidia-driver`` environment (helpers.fakes.node_env, Published.env)."""
        return cls(Path(env["HOST_ROOT_MOUNT"]), Path(env["SYSFS_ROOT"]), Path(env["PROCFS_ROOT"]) / "devices")


def proc_modules(names: Iterable[str]) -> str:
    """/proc/modules text listing ``names`` (kernel/module/procfs.c ``m_show``: name, size, refcount, users,
    state, address, taint)."""
    return "".join(f"{name} 16384 0 - Live 0x0000000000000000 (O)\n" for name in names)


def _stand_in_smi(rc: int) -> str:
    return (
        "#!/bin/sh\n"
        f"# {STAND_IN}: exits {rc} where the real one would need a GPU.\n"
        f'echo "{STAND_IN}: exit {rc}"\n'
        'printf "%s LD_PRELOAD=%s\\n" "$*" "${LD_PRELOAD-}" >>/stand-in/nvidia-smi.log\n'
        f"exit {rc}\n"
    )


# ---- the Kubernetes API stand-in -------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    authorization: str | None
    accept: str | None


def driver_daemonset(
    name: str = "nvidia-driver-daemonset", *, namespace: str = NAMESPACE, owner_kind: str = "ClusterPolicy"
) -> dict[str, Any]:
    """A driver DaemonSet as the operator creates it (labels and controller owner as ``render-driver`` writes
    them, tools dir examples/a-clusterpolicy-talos/ds.json); ``owner_kind`` ClusterPolicy or NVIDIADriver."""
    owner = "cluster-policy" if owner_kind == "ClusterPolicy" else "default"
    api_version = "nvidia.com/v1" if owner_kind == "ClusterPolicy" else "nvidia.com/v1alpha1"
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": "00000000-0000-0000-0000-000000000001",
            "labels": {"app": name, COMPONENT_LABEL: "nvidia-driver"},
            "ownerReferences": [
                {
                    "apiVersion": api_version,
                    "kind": owner_kind,
                    "name": owner,
                    "uid": "00000000-0000-0000-0000-000000000002",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {},
        "status": {},
    }


def _selected(selector: str, labels: Mapping[str, str]) -> bool:
    terms = [t for t in selector.split(",") if t]
    return all(labels.get(k) == v for k, _, v in (t.partition("=") for t in terms))


class _ApiHandler(BaseHTTPRequestHandler):
    api: ClassVar[OperatorApi]

    def log_message(self, *args: object) -> None:  # the requests are recorded instead
        pass

    def _answer(self, status: int, body: object) -> None:
        answer_json(self, status, body)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        api = self.api
        with api.lock:
            api.requests.append(
                ApiRequest(self.command, url.path, query, self.headers.get("Authorization"), self.headers.get("Accept"))
            )
        if self.headers.get("Authorization") != f"Bearer {api.token}":
            self._answer(
                401, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Unauthorized", "code": 401}
            )
            return
        match = re.fullmatch(r"/apis/apps/v1(?:/namespaces/([^/]+))?/daemonsets", url.path)
        if match is None:
            message = f"the stand-in API answers only the DaemonSet list, not {url.path}"
            self._answer(
                404,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "NotFound",
                    "message": message,
                    "code": 404,
                },
            )
            return
        selector = query.get("labelSelector", [""])[0]
        items = [
            d
            for d in api.daemonsets
            if match.group(1) in (None, d["metadata"].get("namespace"))
            and _selected(selector, d["metadata"].get("labels", {}))
        ]
        self._answer(
            200,
            {"kind": "DaemonSetList", "apiVersion": "apps/v1", "metadata": {"resourceVersion": "1"}, "items": items},
        )

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET  # noqa: N815 - recorded, then 404 (no such route)


@dataclass
class OperatorApi:
    """The stand-in Kubernetes API the validator reaches through its in-cluster config (module doc, step 3)."""

    host: str
    port: int
    ca: Path  # the server's self-signed certificate: the service account's ca.crt
    token: str
    daemonsets: list[dict[str, Any]]
    requests: list[ApiRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def operator_api(work: Path, daemonsets: Sequence[Mapping[str, Any]] | None = None) -> Iterator[OperatorApi]:
    """https on 127.0.0.1 serving ``daemonsets`` (default: one driver DaemonSet owned by the ClusterPolicy) to
    the DaemonSet list; 401 without the token, 404 for any other request; every request is recorded."""
    work.mkdir(parents=True, exist_ok=True)
    cert, key = self_signed(work, "api", EC_KEY)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["http/1.1"])
    items = [dict(d) for d in (daemonsets if daemonsets is not None else [driver_daemonset()])]
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ApiHandler)
    httpd.daemon_threads = True
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    api = OperatorApi("127.0.0.1", httpd.server_address[1], cert, "stand-in-service-account-token", items)
    httpd.RequestHandlerClass = type("BoundApiHandler", (_ApiHandler,), {"api": api})
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield api
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


# ---- the sandbox -----------------------------------------------------------------------------------------


def _q(value: object) -> str:
    return shlex.quote(str(value))


def _dev(root: Path) -> list[str]:
    """A throw-away /dev in ``root``: a tmpfs with null, zero, urandom and tty."""
    dev = root / "dev"
    return [f"mount -t tmpfs -o mode=755,nosuid dev {_q(dev)}"] + [
        f"mknod -m 666 {_q(dev / name)} c {major} {minor}" for name, (major, minor) in _BASIC_NODES.items()
    ]


def _proc_view(root: Path, files: Mapping[str, Path]) -> list[str]:
    """``root/proc``: a read-only tmpfs holding ``files`` (name -> their content) and, for every other entry of
    a fresh procfs mounted at ``root/.procfs``, a link to it (``self`` included). Not a bind over the procfs's
    own ``modules``: a kernel without module support (this project's development VMs) has none to bind over."""
    proc, procfs = root / "proc", root / ".procfs"
    keep = "|".join(files)
    return [
        f"mount -t proc -o nosuid,nodev,noexec proc {_q(procfs)}",
        f"mount -t tmpfs -o mode=755,nosuid,nodev,noexec proc-view {_q(proc)}",
        *(f"cp {_q(source)} {_q(proc / name)}" for name, source in files.items()),
        f'for e in {_q(procfs)}/*; do n="${{e##*/}}"; case "$n" in {keep}|[0-9]*) ;; '
        f'*) ln -s "/.procfs/$n" {_q(proc)}/"$n" ;; esac; done',
        f"mount -o remount,ro {_q(proc)}",
    ]


def _bind(source: Path, target: Path, *, readonly: bool = False, recursive: bool = False) -> list[str]:
    lines = [f"mount {'--rbind' if recursive else '--bind'} {_q(source)} {_q(target)}"]
    if readonly:
        lines.append(f"mount -o remount,bind,ro {_q(target)}")
    return lines


@dataclass(frozen=True)
class _Ran:
    returncode: int | None  # None: killed at the bound
    setup: str  # the namespace set-up's output (mount errors)
    output: str  # the command's stdout and stderr, interleaved as written
    elapsed: float


def _run_sandboxed(setup: Sequence[str], command: Sequence[str], log: Path, timeout: float) -> _Ran:
    """``setup`` (shell lines) then ``exec command`` in a new mount namespace, bounded by ``timeout``: past it
    the whole process group is killed. Set-up output is kept apart from the command's."""
    script = "set -eu\n" + "\n".join(setup) + f"\necho {_q(_READY_MARK)}\nexec " + " ".join(_q(a) for a in command)
    started = time.monotonic()
    with log.open("wb") as out:
        child = subprocess.Popen(
            ["unshare", "-m", "sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode: int | None = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
            returncode = None
    elapsed = time.monotonic() - started
    text = log.read_text(errors="replace")
    setup_out, marked, output = text.partition(_READY_MARK + "\n")
    assert marked, f"the sandbox's set-up failed (rc {returncode}):\n{text}"
    return _Ran(returncode, setup_out, output, elapsed)


def _stand_in_log(root: Path) -> tuple[str, ...]:
    log = root / "stand-in/nvidia-smi.log"
    return tuple(log.read_text().splitlines()) if log.exists() else ()


# ---- the startup probe -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeRun:
    returncode: int | None  # None: killed at the bound
    output: str
    ready: str | None  # .driver-ctr-ready after the run
    nvidia_smi_calls: tuple[str, ...]  # the stand-in's record: "<args> LD_PRELOAD=<value>"


def run_startup_probe(
    script: str,
    *,
    work: Path,
    validations_dir: Path,
    sys_root: Path,
    env: Mapping[str, str] | None = None,
    nvidia_smi_rc: int = 0,
    timeout: float = 30.0,
) -> ProbeRun:
    """``sh /usr/local/bin/startup-probe.sh`` with ``script`` there, as the kubelet runs the driver container's
    startup probe (module doc: probe root), ``env`` being the container's env (e.g. GDS_ENABLED=true)."""
    _require_sandbox()
    root = work / "probe-root"
    for sub in ("usr", "usr/local", "proc", "sys", "dev", "run/nvidia/validations", "stand-in", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    setup: list[str] = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            (root / name).unlink(missing_ok=True)
            (root / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            (root / name).mkdir(exist_ok=True)
            setup += _bind(host, root / name, readonly=True)
    (work / "startup-probe.sh").write_text(script)
    (work / "nvidia-smi").write_text(_stand_in_smi(nvidia_smi_rc))
    local = root / "usr/local"
    setup += [
        *_bind(Path("/usr"), root / "usr", readonly=True),
        f"mount -t tmpfs -o mode=755 usr-local {_q(local)}",
        f"mkdir -p {_q(local / 'bin')}",
        f"cp {_q(work / 'startup-probe.sh')} {_q(local / 'bin/startup-probe.sh')}",
        f"install -m 755 {_q(work / 'nvidia-smi')} {_q(local / 'bin/nvidia-smi')}",
        f"mount -t proc -o nosuid,nodev,noexec proc {_q(root / 'proc')}",
        *_bind(sys_root, root / "sys", readonly=True, recursive=True),
        *_dev(root),
        *_bind(validations_dir, root / "run/nvidia/validations"),
    ]
    environment = {"PATH": DEBIAN_PATH, **(env or {})}
    command = [
        "env",
        "-i",
        *(f"{k}={v}" for k, v in environment.items()),
        "chroot",
        str(root),
        "sh",
        "/usr/local/bin/startup-probe.sh",
    ]
    ran = _run_sandboxed(setup, command, work / "probe.log", timeout)
    ready = validations_dir / DRIVER_CTR_READY
    return ProbeRun(ran.returncode, ran.output, ready.read_text() if ready.exists() else None, _stand_in_log(root))


# ---- the validator ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValidatorRun:
    returncode: int | None  # None: still running at the bound (killed)
    output: str  # stdout and stderr as the validator wrote them
    elapsed: float
    files: tuple[str, ...]  # the validations directory after the run
    driver_ready: str | None  # <output-dir>/driver-ready
    nvidia_smi_calls: tuple[str, ...]  # the stand-in's record: "<args> LD_PRELOAD=<value>"
    dev_char_links: dict[str, str]  # /host-dev-char: name -> target
    requests: tuple[ApiRequest, ...]  # what the API stand-in got during the run

    @property
    def stalled(self) -> bool:
        return self.returncode is None

    @property
    def last_line(self) -> str:
        lines = self.output.strip().splitlines()
        return lines[-1] if lines else ""

    @property
    def waiting_for(self) -> str | None:
        """The command of the validator's last "running command sh with args [-c CMD]" line (runCommandWithWait)."""
        for line in reversed(self.output.splitlines()):
            match = _WAITING.match(line)
            if match:
                return match.group(2).removeprefix("-c ")
        return None


def _resolve_in_root(root: Path, relative: str) -> Path | None:
    """Where the validator's ``filepath.EvalSymlinks`` lands for ``<root>/<relative>``, when that stays in the
    root (a relative link); None where nothing is there."""
    path = root / relative
    if not os.path.lexists(path):
        return None
    real = Path(os.path.realpath(path))
    base = Path(os.path.realpath(root))
    return real if real == base or base in real.parents else None


def run_driver_validator(
    *,
    work: Path,
    driver_root: Path,
    validations_dir: Path,
    node: NodeFiles,
    modules: str | Iterable[str],
    api: OperatorApi | None,
    env: Mapping[str, str] | None = None,
    timeout: float = 10.0,
    nvidia_smi_rc: int = 0,
    writable_root: bool = False,
    root_sysfs: bool = True,
) -> ValidatorRun:
    """The real ``nvidia-validator`` as the driver-validation init container runs it (``sh -c nvidia-validator``,
    COMPONENT=driver, WITH_WAIT=true) against ``driver_root`` (module doc: validator root). ``modules``: the
    /proc/modules the validator's lsmod reads (its text, or module names). ``api``: the stand-in API (None: no
    in-cluster config). ``env`` adds to or overrides the container's environment. Past ``timeout`` the run
    is killed and reported ``stalled``."""
    validator = require_validator()
    busybox = busybox_binary()
    root = work / "validator-root"
    mounts = (
        "busybox",
        "bin",
        "usr/bin",
        "proc",
        ".procfs",
        "sys",
        "dev",
        "tmp",
        "host",
        "host-dev-char",
        "stand-in",
        "run/nvidia/driver",
        "run/nvidia/validations",
        SERVICE_ACCOUNT,
    )
    for sub in mounts:
        (root / sub).mkdir(parents=True, exist_ok=True)
    # The image's /busybox: the binary (bound below) and a link per applet; /bin/sh -> /busybox/sh.
    (root / "busybox/busybox").touch()
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, timeout=30, check=True)
    for applet in applets.stdout.split():
        link = root / "busybox" / applet
        if applet != "busybox" and not os.path.lexists(link):
            link.symlink_to("busybox")
    if not os.path.lexists(root / "bin/sh"):
        (root / "bin/sh").symlink_to("/busybox/sh")
    (root / "usr/bin/nvidia-validator").touch()
    modules_text = modules if isinstance(modules, str) else proc_modules(modules)
    (work / "modules").write_text(modules_text)
    (work / "nvidia-smi").write_text(_stand_in_smi(nvidia_smi_rc))
    (work / "nvidia-smi").chmod(0o755)
    (root / "stand-in/nvidia-smi.log").unlink(missing_ok=True)
    for old in (root / "host-dev-char").iterdir():  # a run before in the same work directory
        old.unlink()
    ctr_root = root / CTR_DRIVER_ROOT.lstrip("/")
    setup = [
        *_bind(busybox, root / "busybox/busybox", readonly=True),
        *_bind(validator, root / "usr/bin/nvidia-validator", readonly=True),
        *_proc_view(root, {"modules": work / "modules", "devices": node.proc_devices}),
        *_bind(node.sys_root, root / "sys", readonly=True, recursive=True),
        *_dev(root),
        *_bind(node.host_root, root / "host", readonly=True, recursive=True),
        *_bind(driver_root, ctr_root, readonly=not writable_root, recursive=True),
        *_bind(validations_dir, root / "run/nvidia/validations"),
    ]
    if root_sysfs and (driver_root / "sys").is_dir() and not (driver_root / "sys/bus").exists():
        setup.append(f"mount -t sysfs -o ro,nosuid,nodev,noexec sysfs {_q(ctr_root / 'sys')}")
    smi = next((p for d in _SMI_DIRS if (p := _resolve_in_root(driver_root, f"{d}/nvidia-smi".lstrip("/")))), None)
    if smi is not None:  # else the validator's own "failed to locate nvidia-smi" shows
        setup += _bind(work / "nvidia-smi", ctr_root / smi.relative_to(os.path.realpath(driver_root)), readonly=True)
    environment = {
        "PATH": VALIDATOR_PATH,
        "NVIDIA_VISIBLE_DEVICES": "void",
        "WITH_WAIT": "true",
        "COMPONENT": "driver",
        "OPERATOR_NAMESPACE": NAMESPACE,
        "SLEEP_INTERVAL_SECONDS": str(SLEEP_INTERVAL_S),
    }
    seen = 0
    if api is not None:
        accounts = root / SERVICE_ACCOUNT
        (accounts / "token").write_text(api.token)
        (accounts / "ca.crt").write_bytes(api.ca.read_bytes())
        (accounts / "namespace").write_text(NAMESPACE)
        environment |= {"KUBERNETES_SERVICE_HOST": api.host, "KUBERNETES_SERVICE_PORT": str(api.port)}
        seen = len(api.requests)
    environment |= dict(env or {})
    command = [
        "env",
        "-i",
        *(f"{k}={v}" for k, v in environment.items()),
        "chroot",
        str(root),
        "/bin/sh",
        "-c",
        "nvidia-validator",
    ]
    ran = _run_sandboxed(setup, command, work / "validator.log", timeout)
    ready = validations_dir / "driver-ready"
    links = {p.name: os.readlink(p) for p in sorted((root / "host-dev-char").iterdir()) if p.is_symlink()}
    requests = tuple(api.requests[seen:]) if api is not None else ()
    files = tuple(sorted(p.name for p in validations_dir.iterdir()))
    return ValidatorRun(
        ran.returncode,
        ran.output,
        ran.elapsed,
        files,
        ready.read_text() if ready.exists() else None,
        _stand_in_log(root),
        links,
        requests,
    )
