"""find_module: modules.dep first, else a search of the tree; '-' and '_' are the same name."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.support import MODULES

from driver_container.base.errors import ModuleNotFoundInTreeError
from driver_container.readers.kmod import find_module, read_module

KVER = "6.18.24-talos"


def _tree(base: Path, with_dep: bool) -> Path:
    tree = base / "lib" / "modules" / KVER
    (tree / "extras").mkdir(parents=True)
    (tree / "kernel" / "drivers").mkdir(parents=True)
    shutil.copy(MODULES / "nvidia.ko", tree / "extras" / "nvidia.ko")
    shutil.copy(MODULES / "nvidia.ko.xz", tree / "kernel" / "drivers" / "nvidia-uvm.ko.xz")
    if with_dep:
        (tree / "modules.dep").write_text("kernel/drivers/nvidia-uvm.ko.xz: extras/nvidia.ko\nextras/nvidia.ko:\n")
    return tree


@pytest.mark.parametrize("with_dep", [True, False])
def test_finds_by_name_with_dash_or_underscore(tmp_path: Path, with_dep: bool) -> None:
    tree = _tree(tmp_path, with_dep)
    assert find_module("nvidia", KVER, tmp_path) == tree / "extras" / "nvidia.ko"
    for name in ("nvidia_uvm", "nvidia-uvm"):
        assert find_module(name, KVER, tmp_path) == tree / "kernel" / "drivers" / "nvidia-uvm.ko.xz"
    assert read_module(find_module("nvidia_uvm", KVER, tmp_path)).compression == "xz"


def test_modules_dep_is_authoritative(tmp_path: Path) -> None:
    # Like kmod: a file that depmod did not list is not found while modules.dep exists.
    tree = _tree(tmp_path, with_dep=True)
    shutil.copy(MODULES / "nvidia.ko", tree / "extras" / "nvidia-drm.ko")
    with pytest.raises(ModuleNotFoundInTreeError, match=r"nvidia_drm not found .* \(searched modules.dep\)"):
        find_module("nvidia_drm", KVER, tmp_path)


def test_missing_tree_and_name(tmp_path: Path) -> None:
    with pytest.raises(ModuleNotFoundInTreeError, match="the directory does not exist"):
        find_module("nvidia", "0.0.0", tmp_path)
    _tree(tmp_path, with_dep=False)
    missing = r"module nvidia_peermem not found for kernel 6.18.24-talos"
    with pytest.raises(ModuleNotFoundInTreeError, match=missing) as info:
        find_module("nvidia_peermem", KVER, tmp_path)
    assert (info.value.module, info.value.kernel) == ("nvidia_peermem", KVER)
    assert info.value.tree == f"{tmp_path}/lib/modules/{KVER}"


def test_links_cannot_leave_the_base_directory(tmp_path: Path) -> None:
    base = tmp_path / "host"
    tree = _tree(base, with_dep=False)
    (tree / "extras" / "nvidia.ko").unlink()
    outside = tmp_path / "outside.ko"
    shutil.copy(MODULES / "nvidia.ko", outside)
    (tree / "extras" / "nvidia.ko").symlink_to("/outside.ko")  # absolute: resolved inside the base
    found = find_module("nvidia", KVER, base)
    assert found == base / "outside.ko"
    assert not found.exists()


def test_cli_name_lookup(tmp_path: Path, kmod_modinfo, capsysbinary) -> None:  # type: ignore[no-untyped-def]
    from driver_container.cli import main

    tree = _tree(tmp_path, with_dep=False)
    # kmod reads depmod's binary indexes, so let the real depmod write modules.dep{,.bin} here.
    subprocess.run(["depmod", "-b", str(tmp_path), KVER], check=True)
    assert "extras/nvidia.ko:" in (tree / "modules.dep").read_text()
    with pytest.raises(SystemExit) as done:
        main(["modinfo", "-b", str(tmp_path), "-k", KVER, "nvidia-uvm", "-F", "version"])
    assert done.value.code == 0
    assert capsysbinary.readouterr().out == b"595.91.07\n"
    with pytest.raises(SystemExit):
        main(["modinfo", "-b", str(tmp_path), "-k", KVER, "nvidia"])
    ours = capsysbinary.readouterr().out
    assert ours == kmod_modinfo("-b", tmp_path, "-k", KVER, "nvidia")
    assert ours.startswith(f"filename:       {tree}/extras/nvidia.ko\n".encode())
