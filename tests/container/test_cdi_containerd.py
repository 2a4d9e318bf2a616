"""A real container gets the GPU devices from the toolkit's CDI spec of a published root (docs/operator.md).

The node is Talos-shaped: its /run is a tmpfs mounted ``noexec,nosuid,nodev`` and shared (siderolabs/talos
internal/pkg/mount/v3/helpers.go ``PseudoLate``), and ``nvidia-driver init --no-wait`` publishes Debian's
real 535.309.01 userspace (the Talos 1.11 kmod fixture host, as in tests/integration/test_init_noexec_run.py)
into RUN_DIR/driver on the tmpfs of its own it mounts there. NVIDIA's real nvidia-ctk v1.20.0 writes the
spec gpu-operator v26.7's toolkit writes for a driver container (tests/helpers/toolkit.py: management mode,
driver and dev root ``/run/nvidia/driver``'s stand-in, its nvidia-cdi-hook), under a CDI kind of this
test's own (``nvidia.com/gpu-cdi-test-<pid>=all``: the same edits as ``nvidia.com/gpu=all`` without
clashing with another spec). The consumer is containerd 2.x, what Talos runs (Debian sid's, through ``ctr
run --device``: tests/container/containerd_support.py), with bookworm's runc executing the spec's OCI hooks.

The device nodes in the spec are the ones init made in DRIVER_ROOT/dev with mknod from the fixture's
/proc/devices: stand-ins, no GPU behind them, so nvidia-smi ends at "couldn't communicate with the NVIDIA
driver" (exit 9); a missing library would be a loader error (127).

IMEX (docs/imex.md): NVIDIA's DRA driver gives its compute-domain daemon's container the driver root's
``nvidia-imex`` through the root's management-mode spec (kubernetes-sigs/dra-driver-nvidia-gpu 95932046
cmd/compute-domain-kubelet-plugin/cdi.go) and runs ``nvidia-imex -c /etc/nvidia-imex/imexd.cfg`` there
(cmd/compute-domain-daemon/main.go); the binaries are stand-ins (tests/helpers/imex.py: Debian has none).

Point 3, without Sidero's glibc extension: the spec's update-ldcache hook runs the node's ``/sbin/ldconfig``
unless the spec names another (``--ldconfig-path``); the test removes it from containerd's view and shows
that the operator's spec then fails and that the published root's own static ldconfig serves the hook.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from containerd_support import Containerd, require_containerd, start_containerd
from helpers.fakes import node_env
from helpers.imex import DAEMON_ARGV, userspace_with_imex
from helpers.published_roots import CLI, HOST
from helpers.support import ARTEFACTS, REPO, require
from helpers.toolkit import management_spec, require_toolkit, stand_in_dev_root

from driver_container.base.paths import HostPaths
from driver_container.publish.publisher import publish_driver_root
from driver_container.runtime.runner import Runner

pytestmark = [pytest.mark.container, pytest.mark.artefact]

V = "535.309.01"
USERSPACE = ARTEFACTS / "debian-nvidia-535"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
NO_DRIVER = "couldn't communicate with the NVIDIA driver"
KIND = f"nvidia.com/gpu-cdi-test-{os.getpid()}"
# What the container reports: its ld.so cache, the sha256 of every file the spec mounts, its mounts, the
# symlink the create-symlinks hook makes, and nvidia-smi's output and exit status.
SCRIPT = (
    'echo "== ldconfig"; ldconfig -p; echo "== sha256"; sha256sum "$@"; echo "== mountinfo"; cat /proc/self/mountinfo; '
    f'echo "== links"; readlink {LIBDIR}/libcuda.so {LIBDIR}/libcuda.so.1; '
    'echo "== smi"; nvidia-smi; echo "exit $?"'
)


@dataclass(frozen=True)
class Node:
    run_fs: Path  # the Talos-like /run
    driver_root: Path
    containerd: Containerd
    spec_file: Path


def _mount(*argv: str) -> None:
    subprocess.run(["mount", *argv], check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    require((USERSPACE / "usr/bin/nvidia-smi").is_symlink(), f"Debian NVIDIA {V} chroot at {USERSPACE}")
    require_toolkit()
    require_containerd()
    base = tmp_path_factory.mktemp("cdi-talos")
    host = Path(shutil.copytree(HOST, base / "host-fixture", symlinks=True))
    (host / "proc/self").mkdir()
    run_fs = base / "run"
    run_fs.mkdir()
    mounted: list[Path] = []
    containerd = None
    try:
        _mount("-t", "tmpfs", "-o", "noexec,nosuid,nodev,mode=0755", "talos-run", str(run_fs))
        mounted.append(run_fs)
        _mount("--make-shared", str(run_fs))
        _mount("--bind", f"/proc/{os.getpid()}", str(host / "proc/self"))  # init reads its own mounts
        mounted.append(host / "proc/self")
        env = node_env(host, USERSPACE, run_fs / "nvidia")
        done = subprocess.run(
            [str(CLI), "init", "--no-wait"], env=env, capture_output=True, text=True, timeout=300, check=False, cwd=REPO
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "mounted tmpfs nvidia-driver-root" in done.stderr  # the root is not on the noexec /run
        containerd = start_containerd(base / "containerd")
        spec_file = containerd.cdi_dir / f"{KIND.replace('/', '_')}.json"
        yield Node(run_fs, run_fs / "nvidia/driver", containerd, spec_file)
    finally:
        if containerd is not None:
            containerd.stop()
        for path in reversed(mounted):
            subprocess.run(["umount", "-R", str(path)], check=False, timeout=30)


def write_spec(node: Node, *, ldconfig_path: str | None = None) -> dict[str, object]:
    """The operator's management spec of the published root, under this test's kind, where ctr reads it."""
    spec, _ = management_spec(node.driver_root, node.driver_root, ldconfig_path=ldconfig_path)
    spec["kind"] = KIND
    node.spec_file.write_text(json.dumps(spec))
    return spec


def _sections(stdout: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    current = ""
    for line in stdout.splitlines():
        if line.startswith("== "):
            current = line[3:]
            found[current] = []
        elif current:
            found[current].append(line)
    return found


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def container_problems(node: Node, spec: dict[str, object], name: str) -> list[str]:
    """Run the workload container with the spec's device; what is wrong inside it (empty: all is right)."""
    edits = spec["containerEdits"]
    assert isinstance(edits, dict)
    mounts = {m["containerPath"]: Path(m["hostPath"]) for m in edits["mounts"]}
    done = node.containerd.run(f"{KIND}=all", name, SCRIPT, *sorted(mounts))
    if done.returncode != 0 and "== smi" not in done.stdout:
        return [f"the container did not start (a hook failed?): {done.stderr.strip()}"]
    out = _sections(done.stdout)
    problems = []
    cache = " ".join(out.get("ldconfig", []))
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1"):
        # Debian's /lib is usr/lib: the cache names the library under either.
        where = rf"(/usr)?{re.escape(LIBDIR.removeprefix('/usr'))}/{re.escape(soname)}"
        if not re.search(rf"{re.escape(soname)} \(libc6,x86-64\) => {where}\b", cache):
            problems.append(f"ldconfig -p does not list {soname} in {LIBDIR}")
    inside = {path: digest for digest, _, path in (line.partition("  ") for line in out.get("sha256", []))}
    for container_path, host_path in sorted(mounts.items()):
        if inside.get(container_path) != _sha256(host_path):
            problems.append(f"{container_path}: not the published {host_path}")
    ours = [line for line in out.get("mountinfo", []) if f" {LIBDIR}/libcuda.so.{V} " in line]
    if not ours or " - tmpfs nvidia-driver-root " not in ours[0]:
        problems.append(f"libcuda.so.{V} is not mounted from the driver root's own tmpfs: {ours}")
    if out.get("links", [])[:1] != ["libcuda.so.1"]:
        problems.append(f"create-symlinks made no {LIBDIR}/libcuda.so -> libcuda.so.1: {out.get('links')}")
    smi = out.get("smi", [])
    if smi[-1:] != ["exit 9"] or NO_DRIVER not in " ".join(smi):
        problems.append(f"nvidia-smi did not reach the driver check: {smi}")
    return problems


def _hooks(spec: dict[str, object]) -> set[str]:
    edits = spec["containerEdits"]
    assert isinstance(edits, dict)
    return {h["args"][1] for h in edits["hooks"]}


def test_a_container_gets_the_published_driver_through_containerd(node: Node) -> None:
    """The operator's spec as it is (the node has glibc's /sbin/ldconfig): every hook runs, the libraries
    are the published files from the root's tmpfs, NVML and CUDA are in the container's ld.so cache."""
    node.containerd.host_ldconfig(present=True)
    spec = write_spec(node)
    assert _hooks(spec) == {"create-symlinks", "enable-cuda-compat", "update-ldcache"}  # v1.20.0's hooks here
    assert container_problems(node, spec, "operator-spec") == []


def test_without_the_glibc_extension_the_operators_spec_fails(node: Node) -> None:
    node.containerd.host_ldconfig(present=False)
    try:
        problems = container_problems(node, write_spec(node), "no-glibc")
    finally:
        node.containerd.host_ldconfig(present=True)
    assert len(problems) == 1 and "stat /sbin/ldconfig: no such file or directory" in problems[0], problems


def test_the_published_static_ldconfig_serves_the_update_ldcache_hook(node: Node) -> None:
    """No ldconfig on the node, the spec names the root's: ``--ldconfig-path=<driver root>/sbin/ldconfig``
    (the hook takes ``ldconfig.real`` beside it, api/config/v1/cli.go ``NormalizeLDConfigPath``, copies it into
    the container's mount namespace and runs it there: it must be static, and glibc's is)."""
    node.containerd.host_ldconfig(present=False)
    try:
        spec = write_spec(node, ldconfig_path=str(node.driver_root / "sbin/ldconfig"))
        problems = container_problems(node, spec, "root-ldconfig")
    finally:
        node.containerd.host_ldconfig(present=True)
    assert problems == []


def test_a_library_removed_from_the_root_fails_the_container_check(node: Node) -> None:
    """What the checks above protect: the published NVML library gone, and the container lacks it."""
    lib = node.driver_root / LIBDIR.lstrip("/") / f"libnvidia-ml.so.{V}"
    aside = lib.with_name(lib.name + ".issue-29-aside")
    os.rename(lib, aside)
    try:
        problems = container_problems(node, write_spec(node), "library-removed")
    finally:
        os.rename(aside, lib)
    assert any("does not list libnvidia-ml.so.1" in p for p in problems), problems
    assert any("nvidia-smi did not reach the driver check" in p for p in problems), problems


def test_the_compute_domain_daemon_runs_nvidia_imex_from_the_spec(node: Node, tmp_path: Path) -> None:
    """A root published from a userspace with (stand-in) IMEX binaries; the daemon's command line in a
    container that has nothing but what the spec mounts from that root."""
    userspace = userspace_with_imex(USERSPACE, tmp_path / "userspace")
    root = tmp_path / "driver"
    paths = HostPaths(
        userspace_root=userspace, driver_root_override=root, run_dir=tmp_path / "run", procfs_root=Path("/nonexistent")
    )
    publish_driver_root(paths, V, Runner())
    spec, _ = management_spec(root, stand_in_dev_root(tmp_path / "dev-root"))
    kind = f"{KIND}-imex"
    spec["kind"] = kind
    spec_file = node.spec_file.with_name(f"{kind.replace('/', '_')}.json")
    spec_file.write_text(json.dumps(spec))
    try:
        done = node.containerd.run(f"{kind}=all", "imex", '"$@"; echo "exit $?"', *DAEMON_ARGV)
    finally:
        spec_file.unlink()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"stand-in {DAEMON_ARGV[0]}: {' '.join(DAEMON_ARGV[1:])}" in done.stdout
    assert done.stdout.rstrip().endswith("exit 0")
