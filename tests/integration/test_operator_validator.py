"""gpu-operator v26.7.0's startup probe and its real ``nvidia-validator --component driver`` against a published
root (tests/helpers/operator_validator.py: the validator's flow read at NVIDIA/gpu-operator @10ee5b36, the
sandbox, the API stand-in).

Debian's real 535/550/555 userspaces are published by ``init --no-wait`` on the re-stamped Talos host
(tests/helpers/published_roots.py, shared per session). The probe script is the operator's own ConfigMap
asset, run by ``sh`` as the kubelet runs it; the validator is NVIDIA's binary, whose lsmod (busybox, as in its
image) reads the module list the test puts at /proc/modules. There is no GPU here: ``nvidia-smi`` is a
STAND-IN in both (it says so in their output and exits 0), and the root's /sys is this machine's sysfs,
which shows no NVIDIA PCI function, so no /dev/char link is made.

What the tests show: with every flag false the probe writes ``.driver-ctr-ready`` and the validator writes
``driver-ready``; with GPU_DIRECT_RDMA_ENABLED, GDS_ENABLED or GDRCOPY_ENABLED true in the driver container's
environment the validator waits, without a bound, for nvidia_peermem, nvidia_fs or gdrdrv in lsmod and never
writes ``driver-ready``: the stall the project must keep from happening on Talos.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from helpers.operator_validator import (
    DRIVER_CTR_READY,
    FLAG_MODULES,
    FLAG_STATUS_FILES,
    FLAGS,
    SLEEP_INTERVAL_S,
    STAND_IN,
    NodeFiles,
    OperatorApi,
    ProbeRun,
    ValidatorRun,
    operator_api,
    probe_script_from_assets,
    run_driver_validator,
    run_startup_probe,
)
from helpers.published_roots import ARCHIVE_IMAGE, GRAPHICS, Published, Userspace

pytestmark = [pytest.mark.artefact, pytest.mark.root]

# The graphics trees carry busybox as the image does, so their roots get bin/sh, proc and sys (not the 535 chroot's).
AMD64 = [u for u in GRAPHICS if u.arch == "amd64"]
USERSPACE = GRAPHICS[0]  # Debian's 535.309.01 graphics tree
TALOS_MODULES = ("nvidia_uvm", "nvidia_modeset", "nvidia")  # what Talos's kmod extension loads
STALL_S = 4.0  # a validator run that has not ended by then is stalled (it retries every SLEEP_INTERVAL_S)
DRIVER_READY = (
    "IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\nDRIVER_ROOT_CTR_PATH=/driver-root\n"
    "NVIDIA_DEV_ROOT=/run/nvidia/driver\nDEV_ROOT_CTR_PATH=/driver-root\n"
)
# main.go GDRCopy/NvidiaFs/NvidiaPeermem runValidation: the command each flag's wait runs.
WAITS = {
    "GDRCOPY_ENABLED": "lsmod | grep -E '^gdrdrv\\s'",
    "GDS_ENABLED": "lsmod | grep nvidia_fs",
    "GPU_DIRECT_RDMA_ENABLED": "lsmod | grep -E '^nvidia_peermem\\s'",
}


@dataclass(frozen=True)
class Node:
    """A node with a published root: the probe and the validator share its /run/nvidia/validations."""

    published: Published
    work: Path

    @property
    def validations(self) -> Path:
        return self.work / "validations"

    def probe(
        self, env: dict[str, str] | None = None, *, nvidia_smi_rc: int = 0, sys_root: Path | None = None
    ) -> ProbeRun:
        node = NodeFiles.from_env(self.published.env)
        return run_startup_probe(
            probe_script_from_assets(),
            work=self.work / "probe",
            validations_dir=self.validations,
            sys_root=sys_root or node.sys_root,
            env=env,
            nvidia_smi_rc=nvidia_smi_rc,
        )

    def validator(
        self,
        api: OperatorApi | None,
        modules: tuple[str, ...] = TALOS_MODULES,
        *,
        timeout: float = 30.0,
        root_sysfs: bool = True,
    ) -> ValidatorRun:
        return run_driver_validator(
            work=self.work / "validator",
            driver_root=self.published.driver_root,
            validations_dir=self.validations,
            node=NodeFiles.from_env(self.published.env),
            modules=modules,
            api=api,
            timeout=timeout,
            root_sysfs=root_sysfs,
        )


@pytest.fixture
def make_node(published_userspaces: Callable[[Userspace], Published], tmp_path: Path) -> Callable[[Userspace], Node]:
    def make(userspace: Userspace) -> Node:
        node = Node(published_userspaces(userspace), tmp_path / userspace.name)
        node.validations.mkdir(parents=True)
        return node

    return make


@pytest.fixture
def node(make_node: Callable[[Userspace], Node]) -> Node:
    return make_node(USERSPACE)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[OperatorApi]:
    with operator_api(tmp_path / "api") as served:
        yield served


def _flags(**enabled: bool) -> dict[str, bool]:
    return {flag: enabled.get(flag, False) for flag in FLAGS}


def _probe_passes(node: Node, env: dict[str, str]) -> None:
    probe = node.probe(env)
    assert probe.returncode == 0, probe.output
    assert f"{STAND_IN}: exit 0" in probe.output
    assert probe.ready is not None and yaml.safe_load(probe.ready) == _flags(**{k: v == "true" for k, v in env.items()})


def _assert_passed(run: ValidatorRun) -> None:
    assert run.returncode == 0, run.output
    assert run.driver_ready == DRIVER_READY, run.output


def _assert_stalled_on(run: ValidatorRun, command: str) -> None:
    assert run.stalled, f"the validator ended (rc {run.returncode}) instead of waiting:\n{run.output}"
    assert "driver-ready" not in run.files and run.driver_ready is None
    assert run.waiting_for == command, run.output
    # runCommandWithWait's own lines, once per try (a try every SLEEP_INTERVAL_S)
    assert run.output.count(f"running command sh with args [-c {command}]") >= 2, run.output
    assert run.last_line == f"command failed, retrying after {SLEEP_INTERVAL_S} seconds", run.output


# The release route's image too (USERSPACE_SOURCE=archive, laid out by the archive's MANIFEST; needs the engine).
@pytest.mark.parametrize(
    "userspace",
    [
        *(pytest.param(u, id=u.name) for u in AMD64),
        pytest.param(ARCHIVE_IMAGE, id=ARCHIVE_IMAGE.name, marks=[pytest.mark.container]),
    ],
)
def test_flags_false_the_probe_writes_ctr_ready_and_the_validator_driver_ready(
    make_node: Callable[[Userspace], Node], api: OperatorApi, userspace: Userspace
) -> None:
    node = make_node(userspace)
    probe = node.probe()
    assert probe.returncode == 0, probe.output
    assert probe.nvidia_smi_calls == (" LD_PRELOAD=",)  # the probe ran the stand-in nvidia-smi from PATH, once
    assert probe.ready == "GDRCOPY_ENABLED: false\nGDS_ENABLED: false\nGPU_DIRECT_RDMA_ENABLED: false\n"
    assert (node.validations / DRIVER_CTR_READY).read_text() == probe.ready

    run = node.validator(api)
    _assert_passed(run)
    assert run.files == (DRIVER_CTR_READY, "driver-ready")
    assert "No pre-installed driver detected on the host" in run.output
    assert "is managed by GPU Operator. Checking driver container status." in run.output
    assert f"{STAND_IN}: exit 0" in run.output
    # the validator found the root's own libnvidia-ml and preloaded it into the (stand-in) nvidia-smi
    library = f"/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{userspace.version}"
    assert run.nvidia_smi_calls == (f" LD_PRELOAD={library}",)
    assert "lsmod" not in run.output  # no flag: no module is waited for
    assert [(r.method, r.path, r.query) for r in run.requests] == [
        (
            "GET",
            "/apis/apps/v1/namespaces/gpu-operator/daemonsets",
            {"labelSelector": ["app.kubernetes.io/component=nvidia-driver"]},
        ),
    ]
    assert run.requests[0].authorization == f"Bearer {api.token}"
    assert run.dev_char_links == {}  # this machine's sysfs shows no NVIDIA GPU
    assert "No NVIDIA devices found in /run/nvidia/driver" in run.output
    # every mount of both runs ended with its namespace
    assert str(node.work) not in Path("/proc/self/mountinfo").read_text()


@pytest.mark.parametrize("flag", FLAGS)
def test_a_flag_without_its_module_stalls_the_validator(node: Node, api: OperatorApi, flag: str) -> None:
    """GPU_DIRECT_RDMA_ENABLED without nvidia_peermem (which Talos cannot load), GDS_ENABLED without nvidia_fs,
    GDRCOPY_ENABLED without gdrdrv: the validator never writes driver-ready; it retries lsmod for ever."""
    _probe_passes(node, {flag: "true"})
    run = node.validator(api, timeout=STALL_S)
    _assert_stalled_on(run, WAITS[flag])
    assert FLAG_STATUS_FILES[flag] not in run.files
    assert f"Validating additional driver component: {_component(flag)}" in run.output


@pytest.mark.parametrize("flag", FLAGS)
def test_a_flag_with_its_module_loaded_passes(node: Node, api: OperatorApi, flag: str) -> None:
    _probe_passes(node, {flag: "true"})
    run = node.validator(api, (*TALOS_MODULES, FLAG_MODULES[flag]))
    _assert_passed(run)
    assert run.files == tuple(sorted((DRIVER_CTR_READY, "driver-ready", FLAG_STATUS_FILES[flag])))
    assert run.output.count(f"running command sh with args [-c {WAITS[flag]}]") == 1
    # grep's match: the line busybox's lsmod printed from the module list at /proc/modules
    assert any(line.split()[:1] == [FLAG_MODULES[flag]] for line in run.output.splitlines()), run.output


def test_every_flag_with_every_module_passes(node: Node, api: OperatorApi) -> None:
    _probe_passes(node, dict.fromkeys(FLAGS, "true"))
    run = node.validator(api, (*TALOS_MODULES, *FLAG_MODULES.values()))
    _assert_passed(run)
    assert set(FLAG_STATUS_FILES.values()) <= set(run.files)


def test_before_the_probe_passes_the_validator_waits_for_ctr_ready(node: Node, api: OperatorApi) -> None:
    run = node.validator(api, timeout=STALL_S)
    _assert_stalled_on(run, f"stat /run/nvidia/validations/{DRIVER_CTR_READY}")
    assert run.nvidia_smi_calls == ()


def test_the_probe_fails_without_nvidia_or_when_nvidia_smi_fails(node: Node, tmp_path: Path) -> None:
    no_module = tmp_path / "sys-without-nvidia"
    (no_module / "module").mkdir(parents=True)
    probe = node.probe(sys_root=no_module)
    assert (probe.returncode, probe.output.strip(), probe.ready) == (1, "NVIDIA kernel module not loaded", None)
    assert probe.nvidia_smi_calls == ()
    probe = node.probe(nvidia_smi_rc=9)
    assert probe.returncode == 1 and probe.ready is None
    assert probe.output.splitlines() == [f"{STAND_IN}: exit 9", "nvidia-smi failed"]


def test_a_driver_daemonset_the_operator_does_not_own_skips_the_flag_checks(node: Node, tmp_path: Path) -> None:
    """``isDriverManagedByOperator`` false (no owned DaemonSet listed): neither .driver-ctr-ready nor its flags
    are looked at, so the same RDMA flag passes without nvidia_peermem."""
    _probe_passes(node, {"GPU_DIRECT_RDMA_ENABLED": "true"})
    with operator_api(tmp_path / "api-empty", daemonsets=[]) as empty:
        run = node.validator(empty)
    _assert_passed(run)
    assert "lsmod" not in run.output and "driver-ctr-ready" not in run.output
    assert len(run.requests) == 1


def test_without_a_sysfs_in_the_root_the_validator_fails(node: Node, api: OperatorApi) -> None:
    """The dev root is the driver root (it has dev/), and the validator reads its sys/bus/pci/devices before it
    writes driver-ready: with the root's sys an empty directory (init could not mount a sysfs there,
    DRIVER_ROOT_SYS_MISSING) it exits 1, and the init container would restart for ever."""
    _probe_passes(node, {})
    run = node.validator(api, root_sysfs=False)
    assert run.returncode == 1 and run.driver_ready is None
    assert "unable to read PCI bus devices: open /run/nvidia/driver/sys/bus/pci/devices" in run.output


def _component(flag: str) -> str:
    return {"GDRCOPY_ENABLED": "gdrcopy", "GDS_ENABLED": "nvidia-fs", "GPU_DIRECT_RDMA_ENABLED": "nvidia-peermem"}[flag]
