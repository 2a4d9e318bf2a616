"""Talos facts the entrypoint must get right (sources in docs/talos.md and each fixture README)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from helpers.support import REPO, fixture_paths
from helpers.talos import talos_tree as _talos_tree

from driver_container.base.errors import ModuleWaitTimeout
from driver_container.findings import check, talos_module_snippet
from driver_container.formats.talos_config import module_config_snippet, parse_talos_version, uses_kernel_module_config
from driver_container.inspect.hoststate import inspect_host
from driver_container.lifecycle.modwait import machine_config_snippet, required_modules, wait_for_modules
from driver_container.runtime.supervise import Shutdown
from driver_container.settings import Settings


@pytest.mark.parametrize(
    ("version", "document"),
    [
        ("v1.9.0", False),
        ("v1.13.9", False),
        ("v1.14.0-alpha.2", False),  # KernelModuleConfig: v1.14.0-beta.0
        ("v1.14.0-beta.0", True),
        ("v1.14.0-rc.1", True),
        ("v1.14.0", True),
        ("v1.15.2", True),
        ("v2.0.0", True),
        (None, False),
        ("", False),
        ("rolling", False),
    ],
)
def test_form_follows_the_talos_version(version: str | None, document: bool) -> None:
    assert uses_kernel_module_config(version) is document
    text = module_config_snippet([("nvidia", ["NVreg_EnableGpuFirmware=1"]), ("nvidia_uvm", [])], version)
    # One form only: never the same module both ways (talos.md: the document would win, silently).
    assert ("kind: KernelModuleConfig" in text) is document
    assert ("machine:" in text) is not document


@pytest.mark.parametrize("version", ["v1.13.9", "v1.14.0"])
def test_snippet_never_has_an_empty_parameters_key(version: str) -> None:
    text = module_config_snippet(
        [("nvidia", []), ("nvidia_uvm", []), ("nvidia_modeset", ["hdmi_deepcolor=1"])], version
    )
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    entries = docs if uses_kernel_module_config(version) else docs[0]["machine"]["kernel"]["modules"]
    assert [e["name"] for e in entries] == ["nvidia", "nvidia_uvm", "nvidia_modeset"]
    for entry in entries:
        assert "parameters" not in entry or entry["parameters"], entry  # a null list fails the schema
    assert entries[2]["parameters"] == ["hdmi_deepcolor=1"]
    if uses_kernel_module_config(version):
        assert all(d["apiVersion"] == "v1alpha1" and d["kind"] == "KernelModuleConfig" for d in docs)


def test_parse_talos_version() -> None:
    assert parse_talos_version("v1.13.9") == (1, 13, "")
    assert parse_talos_version("v1.14.0-beta.0") == (1, 14, "beta.0")
    assert parse_talos_version("1.14.0") == (1, 14, "")
    assert parse_talos_version("v1.x") is None


def test_findings_fix_fits_the_node_version(tmp_path: Path) -> None:
    for version, form in (
        ("v1.13.9", "    modules:\n      - name: nvidia_uvm"),
        ("v1.14.0", "kind: KernelModuleConfig\nname: nvidia_uvm"),
    ):
        tree = _talos_tree(tmp_path / version, version, "talos-1.13-uvm-missing")
        state = inspect_host(fixture_paths(tree), Settings())
        fix = next(f.fix for f in check(state) if f.code == "UVM_NOT_LOADED")
        assert form in fix, fix
        assert "parameters:" not in fix and fix.count("nvidia_uvm") >= 1
    assert "parameters:\n  - a=1" in talos_module_snippet("nvidia", ["a=1"], "v1.14.0")
    assert "        parameters:\n          - a=1" in talos_module_snippet("nvidia", ["a=1"], "v1.13.9")


def test_no_peermem_on_talos_init_does_not_wait_for_it(tmp_path: Path) -> None:
    rdma = Settings(gpu_direct_rdma=True)
    assert "nvidia_peermem" not in required_modules(rdma, talos=True)
    assert "nvidia_peermem" in required_modules(rdma, talos=False)
    settings = rdma._replace(module_wait_timeout=0.2)
    paths = fixture_paths(_talos_tree(tmp_path))  # Talos host without nvidia_peermem
    found = wait_for_modules(paths, settings, Shutdown(), talos=True, poll_s=0.05)
    assert found is not None and not found.modules["nvidia_peermem"].loaded


def test_rdma_on_talos_is_refused_naming_the_setting_and_dma_buf(tmp_path: Path) -> None:
    """The operator's validator would wait for nvidia_peermem forever (tests/integration/test_operator_settings.py
    runs it): init refuses before Ready and names driver.rdma.enabled=false."""
    state = inspect_host(fixture_paths(_talos_tree(tmp_path)), Settings(gpu_direct_rdma=True))
    by_code = {f.code: f for f in check(state)}
    assert "PEERMEM_NOT_LOADED" not in by_code  # that one would say "list nvidia_peermem"
    error = by_code["PEERMEM_NOT_ON_TALOS"]
    assert error.severity == "error" and "-EINVAL" in error.message and "driver.rdma.enabled=true" in error.message
    assert error.fix.startswith("set driver.rdma.enabled=false") and "spec.rdma.enabled=false" in error.fix
    assert "DMA-BUF" in error.fix and "- name: nvidia_peermem" not in error.fix


def test_timeout_fix_is_one_form_for_the_version(tmp_path: Path) -> None:
    paths = fixture_paths(_talos_tree(tmp_path, scenario="talos-1.13-uvm-missing"))
    settings = Settings()._replace(module_wait_timeout=0.1)
    with pytest.raises(ModuleWaitTimeout) as caught:
        wait_for_modules(paths, settings, Shutdown(), talos=True, poll_s=0.05, talos_version="v1.14.0")
    fix = caught.value.fix or ""
    assert "kind: KernelModuleConfig\nname: nvidia_uvm" in fix and "machine:" not in fix
    assert machine_config_snippet(("nvidia",), "v1.13.9") == "machine:\n  kernel:\n    modules:\n      - name: nvidia"


def test_firmware_fix_on_talos_names_the_kernel_argument(tmp_path: Path) -> None:
    tree = _talos_tree(tmp_path)
    shutil.rmtree(tree / "userspace/lib/firmware")
    state = inspect_host(fixture_paths(tree), Settings())
    fixes = {f.fix for f in check(state) if f.code == "FIRMWARE_MISSING"}
    assert fixes
    assert all("firmware_class.path=" in f and "schematic's customization.extraKernelArgs" in f for f in fixes)
    assert not any("machine.install" in f for f in fixes)  # deprecated since Talos 1.12 (node/firmware.py)


@pytest.mark.parametrize("name", ["talos-machine-config.yaml", "talos-kernel-module-config.yaml"])
def test_deploy_snippets_are_schema_shaped(name: str) -> None:
    docs = [d for d in yaml.safe_load_all((REPO / "docs/deploy" / name).read_text()) if d is not None]
    entries = docs[0]["machine"]["kernel"]["modules"] if "machine" in docs[0] else docs
    names = [e["name"] for e in entries]
    assert len(names) == len(set(names)) and "nvidia_uvm" in names and "nvidia_peermem" not in names
    for entry in entries:
        assert "parameters" not in entry or entry["parameters"], entry
    # Each file uses one form: a module configured both ways is ambiguous (the document wins).
    assert all(("kind" in d) is ("machine" not in docs[0]) for d in docs)
