"""base/errors.py: ``Problem`` and the structured fields of every exception class, read from real raise sites.

Each test asserts fields, not message text (the messages are asserted where they are made). The fields of
DriverInUseError, ModuleLoadError, VerificationError, ModuleNotFoundInTreeError, ModuleWaitTimeout,
HostDriverPresentError and KubernetesError (HTTP status) are asserted beside the flows that raise them
(tests/unit/modprobe, manager, lifecycle/test_waits.py, readers/test_lookup.py, integration/test_manager_api.py).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from driver_container.base.errors import (
    CommandError,
    DaemonError,
    DerError,
    DriverContainerError,
    ElfFormatError,
    FabricError,
    ForbiddenCommandError,
    HostFileNotFound,
    HostReadError,
    KubernetesError,
    LdCacheFormatError,
    LockError,
    ModuleFormatError,
    PublishError,
    SymlinkLoopError,
    UsageError,
    UserspaceError,
    VerdictFormatError,
)
from driver_container.base.paths import HostPaths
from driver_container.base.problems import Problem, noted
from driver_container.base.resolver import Root
from driver_container.cli import report_error
from driver_container.formats.kmod.der import element
from driver_container.formats.ldcache import parse_ld_cache
from driver_container.formats.modconf import driver_major, parse_module_conf
from driver_container.inspect.verdict import parse_verdict
from driver_container.kube.kubeconfig import parse_kubeconfig
from driver_container.lifecycle.init import _check_alive
from driver_container.logs import JsonFormatter
from driver_container.node.fabricdaemons import Daemon, FabricDaemons
from driver_container.node.fabricmanager import write_config
from driver_container.publish.plan import relative_target
from driver_container.readers.elf import read_elf_deps
from driver_container.readers.fabric import FabricInfo
from driver_container.readers.kmod import read_module
from driver_container.runtime.fsutil import check_relative
from driver_container.runtime.lock import PidLock
from driver_container.runtime.runner import Runner
from driver_container.settings import Settings, parse_bool, parse_seconds


def test_problem_is_a_frozen_hashable_value_shown_as_path_colon_message() -> None:
    problem = Problem(Path("/proc/modules"), "unexpected line 'x'")
    assert (problem.path, problem.message) == ("/proc/modules", "unexpected line 'x'")
    assert str(problem) == "/proc/modules: unexpected line 'x'"
    assert problem == Problem("/proc/modules", "unexpected line 'x'") != Problem("/proc/other", "unexpected line 'x'")
    assert len({problem, Problem("/proc/modules", "unexpected line 'x'")}) == 1
    assert pickle.loads(pickle.dumps(problem)) == problem  # HostState crosses the forked publisher
    with pytest.raises(AttributeError):
        problem.path = "/elsewhere"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del problem.message
    assert str(Problem("", "no path")) == "no path"


def test_a_read_error_becomes_a_problem_without_repeating_its_path(tmp_path: Path) -> None:
    with pytest.raises(HostFileNotFound) as missing:
        Root(tmp_path).read_bytes("gone")
    assert Problem.of(missing.value) == Problem(str(tmp_path / "gone"), "no such file")
    assert str(Problem.of(missing.value)) == missing.value.message
    with pytest.raises(HostReadError) as bad_line:
        parse_module_conf("NVreg_A=1\noops\n", source="/drivers/nvidia.conf")
    assert Problem.of(bad_line.value) == Problem("/drivers/nvidia.conf:2", "'oops' is not NAME=VALUE")
    assert str(Problem.of(bad_line.value)) == bad_line.value.message


def test_noted_keeps_the_read_error_and_returns_the_default(tmp_path: Path) -> None:
    problems: list[Problem] = []
    assert noted(problems, lambda: Root(tmp_path).read_bytes("gone"), b"default") == b"default"
    assert noted(problems, lambda: b"read", b"default") == b"read"
    assert problems == [Problem(str(tmp_path / "gone"), "no such file")]


def test_usage_error_names_the_variable_and_its_value() -> None:
    with pytest.raises(UsageError) as flag:
        parse_bool("NVIDIA_MODESET", "perhaps", False)
    assert (flag.value.name, flag.value.value) == ("NVIDIA_MODESET", "perhaps")
    with pytest.raises(UsageError) as seconds:
        parse_seconds("MODULE_WAIT_TIMEOUT", "-1", 1.0)
    assert (seconds.value.name, seconds.value.value) == ("MODULE_WAIT_TIMEOUT", "-1")
    with pytest.raises(UsageError) as version:
        driver_major("5x5.1")
    assert (version.value.name, version.value.value) == ("DRIVER_VERSION", "5x5.1")


def test_host_read_errors_carry_their_path_and_line(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "big").write_bytes(b"x" * 20)
    os.symlink("loop", tmp_path / "loop")
    root = Root(tmp_path)
    cases = [("dir", HostReadError), ("big", HostReadError), ("loop", SymlinkLoopError), ("absent", HostFileNotFound)]
    for name, cls in cases:
        with pytest.raises(cls) as caught:
            root.read_bytes(name, limit=10)
        assert (caught.value.path, caught.value.line) == (str(tmp_path / name), None), name
    with pytest.raises(HostReadError) as conf:
        parse_module_conf('NVreg_A="unterminated\n', source="/drivers/nvidia.conf")
    assert (conf.value.path, conf.value.line) == ("/drivers/nvidia.conf", 1)


def test_format_errors_name_their_file(tmp_path: Path) -> None:
    with pytest.raises(LdCacheFormatError) as cache:
        parse_ld_cache(b"not a cache", source="/root/etc/ld.so.cache")
    assert cache.value.path == "/root/etc/ld.so.cache"
    (tmp_path / "nvidia.ko").write_text("not a module\n")
    with pytest.raises(ModuleFormatError) as module:
        read_module(tmp_path / "nvidia.ko")
    assert module.value.path == str(tmp_path / "nvidia.ko")
    (tmp_path / "libcuda.so.1").write_bytes(b"\x7fELF" + b"\x09" * 60)  # bad class/byte order
    with pytest.raises(ElfFormatError) as elf:
        read_elf_deps(tmp_path / "libcuda.so.1")
    assert elf.value.path == str(tmp_path / "libcuda.so.1")
    with pytest.raises(DerError) as der:
        element(b"\x30\x05\x02")  # a SEQUENCE of 5 bytes with 1 present
    assert der.value.offset == 2
    with pytest.raises(VerdictFormatError) as verdict:
        parse_verdict('{"format": "something else"}')
    assert verdict.value.key == "format"
    with pytest.raises(KubernetesError) as kubeconfig:
        parse_kubeconfig("a: [b\n", source="/etc/kubeconfig")
    assert (kubeconfig.value.path, kubeconfig.value.status) == ("/etc/kubeconfig", None)


def test_publish_and_userspace_errors_name_the_path() -> None:
    with pytest.raises(PublishError) as published:
        check_relative("usr/../../etc/passwd")
    assert published.value.path == "usr/../../etc/passwd"
    with pytest.raises(UserspaceError) as link:
        relative_target(PurePosixPath("usr/lib/libcuda.so.1"), PurePosixPath("../etc/passwd"))
    assert link.value.path == "usr/lib/libcuda.so.1"


def test_lock_error_names_the_file_and_the_holder(tmp_path: Path) -> None:
    with PidLock(tmp_path / "nvidia-driver.pid"), pytest.raises(LockError) as caught:
        PidLock(tmp_path / "nvidia-driver.pid").acquire()
    assert (caught.value.path, caught.value.holder) == (str(tmp_path / "nvidia-driver.pid"), os.getpid())


def test_command_errors_carry_argv_and_returncode(tmp_path: Path) -> None:
    runner = Runner(env={"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"})
    with pytest.raises(CommandError) as failed:
        runner.run(["false", "--x"])
    assert (failed.value.argv, failed.value.returncode) == (("false", "--x"), 1)
    with pytest.raises(CommandError) as missing:
        Runner(env={"PATH": str(tmp_path)}).run(["nvidia-smi", "-q"])
    assert (missing.value.argv, missing.value.returncode) == (("nvidia-smi",), None)
    with pytest.raises(ForbiddenCommandError) as forbidden:
        runner.forbid(frozenset({"modprobe"})).run(["modprobe", "nvidia"])
    assert forbidden.value.argv == ("modprobe",)


def _fabric_info(**overrides: object) -> FabricInfo:
    fields: dict[str, object] = dict(
        kind="nvswitch",
        nvswitch_devices=("0",),
        lpf_devices=(),
        management_port=None,
        missing_modules=(),
        fm_binary="/usr/bin/nv-fabricmanager",
        nvlsm_binary=None,
        fm_config=None,
        nvlsm_config=None,
        host_daemons=(),
    )
    return FabricInfo(**{**fields, **overrides})  # type: ignore[arg-type]


def test_daemon_errors_name_the_daemon_its_pid_and_status(tmp_path: Path) -> None:
    paths = HostPaths(run_dir=tmp_path / "run", userspace_root=tmp_path / "image")
    (tmp_path / "run").mkdir()
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    process.wait(timeout=30)
    daemons = FabricDaemons(_fabric_info(), [Daemon("nv-fabricmanager", process, tmp_path / "fm.pid", ())])
    with pytest.raises(FabricError) as died:
        daemons.check_alive()
    assert (died.value.daemon, died.value.pid, died.value.returncode) == ("nv-fabricmanager", process.pid, 3)
    with pytest.raises(FabricError) as unconfigured:
        write_config(paths, _fabric_info(), Settings())
    assert (unconfigured.value.daemon, unconfigured.value.returncode) == ("nv-fabricmanager", None)

    class Exited:
        pid = 4242

        def exited(self) -> int:
            return 4

    with pytest.raises(DaemonError) as persistenced:
        _check_alive(paths, Exited())  # type: ignore[arg-type]
    assert (persistenced.value.daemon, persistenced.value.pid, persistenced.value.returncode) == (
        "nvidia-persistenced",
        4242,
        4,
    )


def test_fields_survive_the_forked_publishers_pickle_and_reach_the_json_log(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    error = CommandError("ldconfig exited 1", argv=("ldconfig", "-r", "/x"), returncode=1)
    copy = pickle.loads(pickle.dumps(error))  # runtime/supervise.py sends the child's error this way
    assert (type(copy), copy.message, copy.argv, copy.returncode) == (CommandError, error.message, error.argv, 1)
    assert copy.details() == {"argv": ("ldconfig", "-r", "/x"), "returncode": 1}
    assert DriverContainerError("plain").details() == {}
    with caplog.at_level(logging.DEBUG, logger="driver_container.cli"):
        assert report_error(copy) == 1
    # Unchanged by the fields (endswith: a handler another test left on the root logger may write first).
    assert capsys.readouterr().err.endswith("nvidia-driver: error: ldconfig exited 1\n")
    line = json.loads(JsonFormatter().format(caplog.records[-1]))
    assert line["details"] == {"argv": ["ldconfig", "-r", "/x"], "returncode": 1}
