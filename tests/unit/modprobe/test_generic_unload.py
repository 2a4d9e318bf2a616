"""unload_modules / unload_is_safe on fixture hosts with a fake rmmod; the Talos regression."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from helpers.fakes import FakeHost
from helpers.opened import opened_paths

from driver_container.base.errors import DriverInUseError, ForbiddenCommandError
from driver_container.inspect.hoststate import LoadedModule, read_loaded_modules
from driver_container.inspect.platform import detect_platform
from driver_container.modprobe.generic import load_modules
from driver_container.modprobe.unload import unload_is_safe, unload_modules
from driver_container.runtime.runner import MODULE_TOOLS
from driver_container.settings import Settings

Make = Callable[..., FakeHost]


def _mod(name: str, refcnt: int | None, holders: tuple[str, ...] = (), *, builtin: bool = False) -> LoadedModule:
    return LoadedModule(name, True, builtin, "580.105.08", None, refcnt, holders, None, {})


def test_unload_idle_host_in_dependency_order(fake_host: Make) -> None:
    host = fake_host("ubuntu-loaded-idle")
    report = unload_modules(host.paths, Settings(), host.runner)
    assert host.calls() == [["rmmod", "nvidia_modeset"], ["rmmod", "nvidia_uvm"], ["rmmod", "nvidia"]]
    assert report.unloaded == ("nvidia_modeset", "nvidia_uvm", "nvidia")
    assert not any(m.loaded for m in read_loaded_modules(host.paths).modules.values())
    assert host.proc_modules().startswith("ipmi_devintf ")
    # the kernel drops the reference nvidia held on ipmi_msghandler; the module itself stays
    assert "ipmi_msghandler 90112 1 ipmi_devintf, Live" in host.proc_modules()


def test_unload_reads_proc_modules_once_per_look_and_detects_no_platform_it_was_given(fake_host: Make) -> None:
    """/proc/modules once before the rmmods (its users column is kept in LoadedModule.users) and once
    after; the caller's platform is used, not detected again. Traced through audit hooks, nothing patched."""
    host = fake_host("ubuntu-loaded-idle")
    platform = detect_platform(host.paths)
    with opened_paths() as opened:
        unload_modules(host.paths, Settings(), host.runner, platform)
    assert opened.count(str(host.paths.procfs_root / "modules")) == 2, opened
    assert not [p for p in opened if p.endswith("os-release") or p.endswith("osrelease")], opened


def test_unload_with_nothing_loaded_runs_nothing(fake_host: Make) -> None:
    host = fake_host("ubuntu-unloaded")
    assert unload_modules(host.paths, Settings(), host.runner).unloaded == ()
    assert host.calls() == []


def test_busy_host_is_refused_before_any_rmmod(fake_host: Make) -> None:
    host = fake_host("ubuntu-loaded-busy")
    with pytest.raises(DriverInUseError) as info:
        unload_modules(host.paths, Settings(), host.runner)
    message = info.value.message
    assert message.startswith("cannot unload the NVIDIA modules: driver in use by ")
    assert "nvidia_fs (uses nvidia; not an NVIDIA module this container unloads)" in message
    assert "2 references to nvidia from open /dev/nvidia* files" in message
    assert "1 reference to nvidia_uvm from open files of nvidia_uvm" in message
    assert info.value.holders == ("nvidia_fs",)
    assert "nvidia_modeset" not in message.split("driver in use by", 1)[1].replace("uses nvidia_modeset", "")
    assert info.value.fix and "nvidia-persistenced" in info.value.fix
    assert host.calls() == []
    assert read_loaded_modules(host.paths).modules["nvidia"].loaded


def test_load_then_unload_round_trip_with_peermem(fake_host: Make) -> None:
    host = fake_host("ubuntu-mellanox-unloaded")
    load_modules(host.paths, Settings(gpu_direct_rdma=True), host.runner)
    assert read_loaded_modules(host.paths).modules["nvidia"].refcnt == 3
    unload_modules(host.paths, Settings(), host.runner)
    rmmods = [c for c in host.calls() if c[0] == "rmmod"]
    assert rmmods == [["rmmod", m] for m in ("nvidia_peermem", "nvidia_modeset", "nvidia_uvm", "nvidia")]
    assert "nvidia" not in host.proc_modules()


def test_rmmod_failure_midway_names_what_was_unloaded(fake_host: Make) -> None:
    host = fake_host("ubuntu-loaded-idle")
    # something opened /dev/nvidia-uvm after the check: sysfs says 0 for the rule, the kernel refuses
    (host.root / "sys/module/nvidia_uvm/refcnt").write_text("0\n")
    (host.fake_dir / "bin/rmmod").write_text(
        '#!/bin/sh\nprintf "rmmod\\t%s\\n" "$1" >>"$FAKE_LOG"\n'
        '[ "$1" = nvidia_uvm ] && { echo "rmmod: ERROR: Module nvidia_uvm is in use" >&2; exit 1; }\nexit 0\n'
    )
    busy = r"cannot unload nvidia_uvm: .*in use.*already unloaded: nvidia_modeset"
    with pytest.raises(DriverInUseError, match=busy) as info:
        unload_modules(host.paths, Settings(), host.runner)
    assert (info.value.argv, info.value.returncode) == (("rmmod", "nvidia_uvm"), 1)
    assert host.calls() == [["rmmod", "nvidia_modeset"], ["rmmod", "nvidia_uvm"]]


def test_rule_counts_dependants_without_holder_information() -> None:
    # NVIDIA's rule: nvidia refcnt <= number of loaded nvidia_uvm/modeset/peermem
    loaded = {n: _mod(n, 0) for n in ("nvidia_uvm", "nvidia_modeset")} | {"nvidia": _mod("nvidia", 2)}
    assert unload_is_safe(loaded)[0]
    loaded["nvidia"] = _mod("nvidia", 3)
    assert unload_is_safe(loaded) == (
        False,
        "driver in use by 1 reference to nvidia from open /dev/nvidia* files "
        "(nvidia-persistenced, nvidia-smi, GPU pods)",
    )


def test_rule_uses_proc_modules_users_and_drm_holding_modeset() -> None:
    loaded = {
        "nvidia": _mod("nvidia", 2, ("nvidia_modeset",)),
        "nvidia_modeset": _mod("nvidia_modeset", 1, ("nvidia_drm",)),
        "nvidia_drm": _mod("nvidia_drm", 0),
    }
    safe, message = unload_is_safe(loaded, users={"nvidia": ["nvidia_modeset", "gdrdrv"]})
    assert not safe
    assert message == "driver in use by gdrdrv (uses nvidia; not an NVIDIA module this container unloads)"
    loaded["nvidia"] = _mod("nvidia", 1, ("nvidia_modeset",))
    assert unload_is_safe(loaded, users={"nvidia": ["nvidia_modeset"]})[0]


def test_rule_refuses_builtin_and_dependant_refs() -> None:
    assert not unload_is_safe({"nvidia": _mod("nvidia", None, builtin=True)})[0]
    safe, message = unload_is_safe(
        {"nvidia": _mod("nvidia", 1, ("nvidia_peermem",)), "nvidia_peermem": _mod("nvidia_peermem", 2)}
    )
    assert not safe and message == "driver in use by 2 references to nvidia_peermem from open files of nvidia_peermem"
    assert unload_is_safe({}) == (True, "no NVIDIA module loaded")


# --- Talos: the generic path must never run a module tool ---------------------------------------------


@pytest.mark.parametrize("action", [load_modules, unload_modules])
def test_talos_forbidden_runner_never_invokes_fakes(fake_host: Make, action: Callable[..., object]) -> None:
    host = fake_host("talos-1.13-loaded", version="595.91.07", forbidden=MODULE_TOOLS)
    before = host.proc_modules()
    with pytest.raises(ForbiddenCommandError, match="forbids insmod, modprobe, rmmod"):
        action(host.paths, Settings(gpu_direct_rdma=True), host.runner)
    assert host.calls() == []
    assert not host.log.exists()
    assert host.proc_modules() == before


@pytest.mark.parametrize("action", [load_modules, unload_modules])
def test_talos_detected_refuses_even_with_a_permissive_runner(fake_host: Make, action: Callable[..., object]) -> None:
    host = fake_host("talos-1.13-loaded", version="595.91.07")
    with pytest.raises(ForbiddenCommandError, match=r"on Talos \(os-release ID=talos\)"):
        action(host.paths, Settings(), host.runner)
    assert host.calls() == []


def test_talos_override_to_talos_refuses_on_a_generic_host(fake_host: Make) -> None:
    host = fake_host("ubuntu-loaded-idle")
    with pytest.raises(ForbiddenCommandError, match="DRIVER_PLATFORM=talos"):
        unload_modules(host.paths, Settings(driver_platform="talos"), host.runner)
    assert host.calls() == []
