"""``nvidia-gds-driver install`` / ``nvidia-gdrcopy-driver install`` (lifecycle/companion.py) on fixture hosts."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from helpers.support import FIXTURES, fixture_paths

from driver_container.base.errors import VerificationError
from driver_container.lifecycle.companion import run_companion
from driver_container.runtime.supervise import Shutdown
from driver_container.settings import Settings


def _host(tmp_path: Path, *loaded: str, version: str = "v1.14.0-rc.1") -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "hosts/talos-1.13-open-595", tree, symlinks=True)
    release = tree / "host/etc/os-release"
    release.write_text(release.read_text().replace("v1.13.9", version))
    with (tree / "proc/modules").open("a") as f:
        f.writelines(f"{name} 65536 0 - Live 0x0000000000000000 (O)\n" for name in loaded)
    return tree


def _signalled() -> Shutdown:
    """A shutdown whose signal already arrived: the wait returns at once (no handler is installed)."""
    shutdown = Shutdown()
    shutdown.signum = 15
    return shutdown


@pytest.mark.parametrize("module", ["nvidia_fs", "gdrdrv"])
def test_a_module_talos_loaded_is_held_up_until_a_signal(
    tmp_path: Path, module: str, caplog: pytest.LogCaptureFixture
) -> None:
    paths = fixture_paths(_host(tmp_path, module))
    with caplog.at_level(logging.INFO):
        run_companion(paths, Settings(), module, _signalled())
    messages = [r.getMessage() for r in caplog.records]
    assert (
        f"{module} is loaded (Talos loaded it from the machine config): nothing to build or load; waiting" in messages
    )
    assert f"SIGTERM received: exiting ({module} stays loaded)" in messages


@pytest.mark.parametrize(
    ("module", "version", "code", "fix"),
    [
        ("nvidia_fs", "v1.13.9", "GDS_MODULE_NOT_LOADED", "Talos v1.13.9 ships no nvidia-fs.ko"),
        ("nvidia_fs", "v1.14.0-rc.1", "GDS_MODULE_NOT_LOADED", "kind: KernelModuleConfig\nname: nvidia_fs"),
        ("gdrdrv", "v1.13.9", "GDRCOPY_MODULE_NOT_LOADED", "      - name: gdrdrv"),
    ],
)
def test_a_module_talos_did_not_load_is_refused_with_the_fix(
    tmp_path: Path, module: str, version: str, code: str, fix: str
) -> None:
    paths = fixture_paths(_host(tmp_path, version=version))
    with pytest.raises(VerificationError) as caught:
        run_companion(paths, Settings(), module, _signalled())
    assert caught.value.codes == (code,) and fix in (caught.value.fix or "")


def test_other_hosts_are_pointed_at_nvidias_image(tmp_path: Path) -> None:
    paths = fixture_paths(_host(tmp_path, "nvidia_fs"))
    with pytest.raises(VerificationError) as caught:
        run_companion(paths, Settings(driver_platform="generic"), "nvidia_fs", _signalled())
    assert caught.value.codes == ("COMPANION_NOT_TALOS",)
    assert "nvcr.io/nvidia/cloud-native/nvidia-fs" in (caught.value.fix or "")
