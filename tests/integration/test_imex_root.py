"""nvidia-imex and nvidia-imex-ctl in a published root, for NVIDIA's DRA driver (docs/imex.md).

The image's userspace is a real Debian one, 535.309.01 (the debootstrap chroot) and the 550.163.01 and
555.58.02 trees of tests/helpers/published_roots.py (535/550/555), plus STAND-IN IMEX
binaries (Debian ships none: tests/helpers/imex.py says what the stand-ins are and are not). The publisher
takes NVIDIA's binaries by name (publish/scan.py ``NVIDIA_BINARIES``) with their DT_NEEDED closure from the
image; here that closure includes libgcc_s.so.1, which nothing else published needs.
What NVIDIA's consumers do with them:

- the compute-domain kubelet plugin's host-managed IMEX check looks for ``nvidia-imex-ctl`` under the driver
  root in ``/``, ``/opt/bin``, ``/usr/bin``, ``/usr/sbin``, ``/bin``, ``/sbin`` (the first that resolves to a
  regular file) and runs ``chroot <root> nvidia-imex-ctl -q --u=<socket>``
  (kubernetes-sigs/dra-driver-nvidia-gpu 95932046 cmd/compute-domain-kubelet-plugin/root.go, nvlib.go);
- its management-mode CDI spec of the root (cmd/compute-domain-kubelet-plugin/cdi.go, the toolkit's
  ``newDriverBinariesDiscoverer``) gives the compute-domain daemon's container both binaries, where it runs
  ``nvidia-imex -c /etc/nvidia-imex/imexd.cfg`` (that container: tests/container/test_cdi_containerd.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest
from helpers.imex import DAEMON_ARGV, HOST_CHECK_ARGV, IMEX_BINARIES, userspace_with_imex
from helpers.published_roots import CHROOT_535, GRAPHICS, Userspace
from helpers.support import ARTEFACTS, require
from helpers.toolkit import Item, management_spec, stand_in_dev_root, toolkit_view
from helpers.trees import moved_aside

from driver_container.base.paths import HostPaths
from driver_container.driverroot.toolkit_features import read_absent_features
from driver_container.publish.publisher import publish_driver_root
from driver_container.runtime.runner import Runner

pytestmark = pytest.mark.artefact

V = "535.309.01"
USERSPACE = ARTEFACTS / "debian-nvidia-535"
LIBDIR = "usr/lib/x86_64-linux-gnu"
SEARCH = ("/", "/opt/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin")  # the plugin's getNvidiaImexCtlPath
USERSPACES = (CHROOT_535, *(u for u in GRAPHICS if u.arch == "amd64" and u.version != V))
# What status lists as lost besides IMEX: Debian ships no nvidia-debugdump; the debootstrap chroot has no
# busybox-static (the graphics trees and the image do: publish/static_tools.py).
LOST = {CHROOT_535.name: ["sh", "nvidia-debugdump"]}


class ImexRoot(NamedTuple):
    userspace: Userspace
    path: Path


@pytest.fixture(scope="module", params=USERSPACES, ids=lambda u: u.name)
def imex_root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ImexRoot:
    used: Userspace = request.param
    source = ARTEFACTS / used.artefact
    require(
        (source / "usr/bin/nvidia-smi").is_symlink() or (source / "usr/bin/nvidia-smi").is_file(),
        f"Debian NVIDIA {used.version} userspace at {source}",
    )
    require(os.geteuid() == 0, "root (chroot, mknod)")
    base = tmp_path_factory.mktemp(f"imex-{used.name}")
    userspace = userspace_with_imex(source, base / "userspace")
    dr = base / "driver"
    paths = HostPaths(
        userspace_root=userspace, driver_root_override=dr, run_dir=base / "run", procfs_root=Path("/nonexistent")
    )
    report = publish_driver_root(paths, used.version, Runner())
    assert {f"usr/bin/{name}" for name in IMEX_BINARIES} <= set(report.binaries)
    return ImexRoot(used, dr)


@pytest.fixture
def driver_root(imex_root: ImexRoot) -> Path:
    return imex_root.path


def _chroot(root: Path, argv: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    return subprocess.run(
        ["chroot", str(root), *argv], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def _plugin_finds(root: Path, name: str) -> Path | None:
    for d in SEARCH:
        candidate = root / d.lstrip("/") / name
        if candidate.resolve().is_file():
            return candidate.resolve()
    return None


def test_imex_binaries_are_published_with_their_closure(driver_root: Path) -> None:
    for name in IMEX_BINARIES:
        assert (driver_root / "usr/bin" / name).is_file() and not (driver_root / "usr/bin" / name).is_symlink()
    assert (driver_root / LIBDIR / "libgcc_s.so.1").exists()  # the stand-ins' need beyond nvidia-smi's


def test_the_dra_plugins_host_imex_check_runs_in_the_root(driver_root: Path) -> None:
    assert _plugin_finds(driver_root, "nvidia-imex-ctl") == driver_root / "usr/bin/nvidia-imex-ctl"
    done = _chroot(driver_root, HOST_CHECK_ARGV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"stand-in {HOST_CHECK_ARGV[0]}: {' '.join(HOST_CHECK_ARGV[1:])}" in done.stdout


def test_the_compute_domain_daemons_command_runs_in_the_root(driver_root: Path) -> None:
    done = _chroot(driver_root, DAEMON_ARGV)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"stand-in {DAEMON_ARGV[0]}: {' '.join(DAEMON_ARGV[1:])}" in done.stdout


def test_the_toolkits_management_spec_mounts_them(imex_root: ImexRoot, tmp_path: Path) -> None:
    """What the DRA plugin's CDI spec (management mode) gives the compute-domain daemon's container, and the
    nvidia-ctk warnings of docs/publish.md for IMEX gone."""
    driver_root, version = imex_root.path, imex_root.userspace.version
    view = toolkit_view(driver_root, stand_in_dev_root(tmp_path / "dev-root"), version, tmp_path / "view")
    for name in IMEX_BINARIES:
        assert Item("binary", name) in view.items
        assert view.mounts[f"/usr/bin/{name}"] == driver_root / "usr/bin" / name
    assert not [w for w in view.warnings if "nvidia-imex" in w]


def test_status_no_longer_names_imex_as_lost(imex_root: ImexRoot, tmp_path: Path) -> None:
    absent = read_absent_features(imex_root.path)
    assert [f.name for f in absent] == LOST.get(imex_root.userspace.name, ["nvidia-debugdump"])


def test_without_their_closure_the_check_fails(driver_root: Path) -> None:
    """What the closure protects: libgcc_s.so.1 gone from the root, and the plugin's command cannot run."""
    with moved_aside((driver_root / LIBDIR / "libgcc_s.so.1").resolve()):
        done = _chroot(driver_root, HOST_CHECK_ARGV)
    assert done.returncode == 127 and "libgcc_s.so.1" in done.stderr, done.stdout + done.stderr


def test_the_management_spec_names_no_imex_file_of_a_root_without_them(tmp_path: Path) -> None:
    """The contrast: Debian's own 535 root (no IMEX) gives no such mount; status says what is lost."""
    spec, stderr = management_spec(Path(os.path.realpath(USERSPACE)), stand_in_dev_root(tmp_path))
    mounts = {m["containerPath"] for m in spec["containerEdits"]["mounts"]}
    assert not {f"/usr/bin/{n}" for n in IMEX_BINARIES} & mounts
    assert "Could not locate nvidia-imex" in stderr
