"""The package layout's rules that import-linter cannot see (docs/architecture.md).

- The library search dirs, the ld.so.cache path and its 64-bit entry flags have one definition each
  (formats/userspace_layout.py, formats/ldcache.py): the version finder and the publisher read one image,
  so a second copy of these facts could make them disagree about it.
- A function-local import is allowed only in the functions of ``LOCAL_IMPORTS`` (each keeps an import off
  a measured hot path, bench/README.md) and says so in a comment.
- ``NamedRecord`` is used only by the modules of ``LIGHT_RECORD_MODULES``: those an unchanged restart,
  the peermem probe or ``status`` imports (base/records.py says why, with the measurement); every other record
  is a dataclass.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path, PurePosixPath

import pytest
import typer.main

import driver_container
from driver_container.base.paths import HOST_ROOTS, HostPaths
from driver_container.base.resolver import Root
from driver_container.cli.app import app
from driver_container.formats import userspace_layout
from driver_container.inspect import userspace as version_finder
from driver_container.publish import scan, toolkit_extras

PACKAGE = Path(driver_container.__file__).parent
OWNERS = {
    "etc/ld.so.cache": {"formats/ldcache.py"},
    "-linux-gnu": {"formats/userspace_layout.py"},
    "nvidia/current": {"formats/userspace_layout.py"},
    "usr/share/nvidia/firmware": {"formats/userspace_layout.py"},
    "manifest.json": {"driverroot/manifest.py"},
}
# Whole literals only (a message may name the file): the kernel release is read in one place.
EXACT_OWNERS = {
    "sys/kernel/osrelease": {"inspect/platform.py"},
    "module/firmware_class/parameters/path": {"formats/kernel/sysfs.py"},
}
CACHE_FLAGS_64 = {0x0303, 0x0A03}  # glibc dl-cache.h FLAG_X8664_LIB64, FLAG_AARCH64_LIB64 (with FLAG_ELF_LIBC6)

# The functions that may import inside their body (module -> functions), each to keep what it imports off
# the unchanged restart or the probe (bench/README.md, "Function-local imports": what each keeps out and
# what it measured). tests/integration/test_startup_imports.py and test_status.py check the outcome.
LOCAL_IMPORTS = {
    "__init__.py": {"project_version"},  # importlib.metadata: the version is shown, never needed on a restart
    "base/beneath.py": {"_openat2"},  # ctypes: never on a restart
    "cli/about.py": {"version_lines"},  # the userspace inspection: --version only
    "cli/__init__.py": {  # the probe's floor is a bare interpreter: typer, logging, signal only when needed
        "_console_entry",
        "_init_direct",
        "_probe_fast_path",
        "_register_commands",
        "die_of_sigint",
        "main",
        "report_error",
        "report_unexpected",
        "sigint_as_sigterm",
    },
    "cli/init_cmd.py": {"load", "unload"},  # the module loader (modprobe/): never on Talos
    "base/fileread.py": {"open_below"},  # beneath (pathlib): the peermem probe reads by path only
    "formats/elfdeps.py": {"_header_and_segments", "parse_elf_deps", "_structs"},  # pyelftools: an indexed publish
    "formats/kmod/__init__.py": {"__getattr__"},  # modinfo's formatter: modinfo only
    "formats/kmod/compression.py": {"_zstd"},  # zstandard: a .ko.zst only
    "formats/modconf.py": {"shell_words"},  # shlex: a module parameter that needs quoting only
    "formats/talos_config.py": {"_dump"},  # yaml: a fix text (a failure) only
    "inspect/hoststate.py": {"_fabric", "inspect_host", "_pod_context"},  # fabric, verdict, pod context: operator
    "inspect/modfiles.py": {"read_module_file"},  # the module reader: not for status without module files
    "kube/endpoint.py": {"kubeconfig_endpoint"},  # yaml: never for the service account of init's report
    "kube/nodereport.py": {
        "_client",
        "namespace_of",
        "with_pod",
        "_report_calls",
    },  # in a cluster: client, datetime
    "lifecycle/init.py": {
        "_check_alive",
        "_init_stages",
        "_start_daemons",
        "_start_fabric",
        "_stop_fabric",
        "run_init",
    },  # persistenced, Fabric Manager, modprobe/: not on an unchanged restart
    "lifecycle/peermem.py": {"run_reload"},  # the probe's slow path stays without the module wait
    "lifecycle/publishing.py": {"_publish", "check_published_root", "report_ready", "check_and_publish"},
    "runtime/childresult.py": {"decode_result", "encode_result"},  # pickle: an exception from a child only
    "runtime/forkchild.py": {"_die_with_parent"},  # ctypes: in a forked child only
    "runtime/lock.py": {"_held_elsewhere"},  # /proc/locks and its parser: only when the pid lock is held
}
# The modules an unchanged restart, the peermem probe or `status` imports that define NamedRecords (base/records.py).
LIGHT_RECORD_MODULES = {
    "driverroot/journal.py",
    "driverroot/manifest.py",
    "driverroot/mount.py",
    "driverroot/procsys.py",
    "driverroot/proof.py",
    "driverroot/state.py",
    "driverroot/toolkit_features.py",
    "findings/model.py",
    "formats/elffacts.py",
    "formats/gpu_support.py",
    "formats/kernel/devices.py",
    "formats/kernel/modules.py",
    "formats/kernel/mountinfo.py",
    "formats/kernel/nvidia_proc.py",
    "formats/kernel/pci.py",
    "formats/kernel/sysfs.py",
    "formats/kmod/elf.py",
    "formats/kmod/model.py",
    "formats/ldcache.py",
    "inspect/firmware.py",
    "inspect/hoststate.py",
    "inspect/modfiles.py",
    "inspect/pcigpus.py",
    "inspect/platform.py",
    "inspect/podcontext.py",
    "inspect/supportedgpus.py",
    "inspect/userspace.py",
    "inspect/verdict.py",
    "kube/nodereport.py",
    "lifecycle/init.py",
    "lifecycle/publishing.py",
    "node/devices.py",
    "node/firmware.py",
    "base/paths.py",
    "base/resolver.py",
    "runtime/runner.py",
    "settings/__init__.py",
    "settings/resolve.py",
    "settings/variables.py",
}


def _modules() -> list[tuple[str, str]]:
    return [(str(p.relative_to(PACKAGE)), p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))]


def _code_strings(source: str) -> list[str]:
    """String literals (f-string parts included) that are code, not docstrings."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
    ]


def test_search_dirs_cache_path_manifest_and_kernel_release_are_defined_once() -> None:
    strays = []
    for name, source in _modules():
        for text in _code_strings(source):
            strays += [f"{name}: {text!r}" for fact, owners in OWNERS.items() if fact in text and name not in owners]
            strays += [f"{name}: {text!r}" for fact, own in EXACT_OWNERS.items() if fact == text and name not in own]
    assert not strays, "defined outside its one place: " + "; ".join(strays)


def test_cache_flags_are_defined_once() -> None:
    strays = [
        f"{name}:{n.lineno}"
        for name, source in _modules()
        if name != "formats/ldcache.py"
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Constant) and n.value in CACHE_FLAGS_64 and type(n.value) is int
    ]
    assert not strays, f"64-bit ld.so.cache flags outside formats/ldcache.py: {strays}"


def _comments(source: str) -> dict[int, str]:
    return {
        tok.start[0]: tok.string
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }


def _local_imports(source: str) -> list[tuple[str, ast.stmt]]:
    out = []
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            imports = [n for n in ast.walk(fn) if isinstance(n, ast.Import | ast.ImportFrom)]
            out += [(fn.name, n) for n in imports]
    return out


def test_function_local_imports_name_the_hot_path_they_keep_light() -> None:
    """Each function-local import has a comment with "hot path" on its line or in the comment lines
    just above the function's first import (one comment covers a block of imports)."""
    assert not _undocumented_local_imports(_modules())


def test_function_local_imports_only_in_the_listed_functions() -> None:
    """A function-local import outside ``LOCAL_IMPORTS`` fails, and so does a listed function without one
    (the list stays the short list of what bench/README.md measured)."""
    found = _local_import_sites(_modules())
    assert found - _listed_functions() == set(), "function-local imports outside LOCAL_IMPORTS (move them up)"
    assert _listed_functions() - found == set(), "LOCAL_IMPORTS lists a function without a local import"


def test_the_local_import_checks_fail_on_a_violation() -> None:
    """Both checks above catch a planted violation: an import inside an unlisted function, without a comment."""
    planted = [*_modules(), ("cli/status_cmd.py", "def late() -> None:\n    import json\n")]
    assert _undocumented_local_imports(planted) == ["cli/status_cmd.py:2 (late)"]
    assert _local_import_sites(planted) - _listed_functions() == {("cli/status_cmd.py", "late")}


def _listed_functions() -> set[tuple[str, str]]:
    return {(module, function) for module, functions in LOCAL_IMPORTS.items() for function in functions}


def _local_import_sites(modules: list[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(name, function) for name, source in modules for function, _node in _local_imports(source)}


def _undocumented_local_imports(modules: list[tuple[str, str]]) -> list[str]:
    undocumented = []
    for name, source in modules:
        comments = _comments(source)
        by_function: dict[str, list[ast.stmt]] = {}
        for function, node in _local_imports(source):
            by_function.setdefault(function, []).append(node)
        for function, nodes in by_function.items():
            first = min(n.lineno for n in nodes)
            above = []
            line = first - 1
            while line in comments:
                above.append(comments[line])
                line -= 1
            block = " ".join(above)
            for node in nodes:
                text = comments.get(node.lineno, "") + " " + block
                if "hot path" not in text.lower() and "heavy imports stay inside" not in text:
                    undocumented.append(f"{name}:{node.lineno} ({function})")
    return undocumented


def _named_record_users(modules: list[tuple[str, str]]) -> set[str]:
    """Modules that import ``NamedRecord`` or name it as a base (base/records.py itself defines it)."""
    users = set()
    for name, source in modules:
        for node in ast.walk(ast.parse(source)):
            imported = isinstance(node, ast.ImportFrom) and any(a.name == "NamedRecord" for a in node.names)
            based = isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name | ast.Attribute) and ast.unparse(b).endswith("NamedRecord") for b in node.bases
            )
            if (imported or based) and name != "base/records.py":
                users.add(name)
    return users


def test_named_records_only_on_the_measured_hot_paths() -> None:
    """NamedRecord only in LIGHT_RECORD_MODULES (base/records.py), and each listed module still uses it."""
    users = _named_record_users(_modules())
    assert users - LIGHT_RECORD_MODULES == set(), "NamedRecord off the hot paths: use a frozen, slotted dataclass"
    assert LIGHT_RECORD_MODULES - users == set(), "LIGHT_RECORD_MODULES lists a module without a NamedRecord"


def test_the_named_record_check_fails_on_a_violation() -> None:
    """The check above catches a record planted in a module off the hot paths."""
    source = "from driver_container.base.records import NamedRecord\nclass X(NamedRecord):\n    a: int\n"
    planted = ("report/model.py", source)
    assert _named_record_users([*_modules(), planted]) - LIGHT_RECORD_MODULES == {"report/model.py"}


def test_modules_stay_small() -> None:
    """~300 lines a module (the developers' guide)."""
    long = [f"{name} ({len(source.splitlines())})" for name, source in _modules() if len(source.splitlines()) > 300]
    assert not long, f"modules over ~300 lines: {long}"


def test_host_roots_are_declared_once() -> None:
    """paths.HOST_ROOTS names every HostPaths root, and the global CLI options' variables are exactly its rows:
    the other variables (LOG_FORMAT, VERBOSE, ...) are resolved by settings/resolve.py, never by typer too."""
    fields = set(HostPaths._fields)
    assert {r.field for r in HOST_ROOTS} == fields
    command = typer.main.get_command(app)
    envvars = {p.envvar for p in command.params if p.envvar}
    assert envvars == {r.env for r in HOST_ROOTS}


def test_version_finder_and_publisher_search_one_list_of_library_dirs() -> None:
    """Both read ``formats.userspace_layout.LIBRARY_DIRS`` itself, not a copy."""
    for module in (version_finder, scan, toolkit_extras):
        assert module.LIBRARY_DIRS is userspace_layout.LIBRARY_DIRS, module.__name__
    assert not hasattr(userspace_layout, "SEARCH_DIRS") and not hasattr(userspace_layout, "lib_dirs")


VERSION = "595.91.07"


@pytest.mark.parametrize("libdir", ["usr/lib", "lib", ".", "usr/lib64/nvidia/current", "opt/nvidia/lib"])
def test_a_library_in_any_one_dir_is_seen_by_both_or_neither(tmp_path: Path, libdir: str) -> None:
    """``usr/lib`` and ``lib`` the publisher searched and the version finder did not; the root and
    ``usr/lib64/nvidia/current`` the other way round: one image, one answer from both."""
    root = tmp_path / "userspace"
    (root / libdir).mkdir(parents=True, exist_ok=True)
    (root / libdir / f"libcuda.so.{VERSION}").write_bytes(b"\x7fELF")
    found = version_finder.find_userspace(Root(root))
    listed = scan._listed_libraries(Root(root), VERSION)
    assert (found.version == VERSION) == bool(listed) == (scan._versions_present(Root(root)) == [VERSION])
    assert found.version == (VERSION if libdir in ("usr/lib", "lib", ".") else None)
    if listed:
        assert [found.libcuda] == listed == [PurePosixPath("/", libdir, f"libcuda.so.{VERSION}")]


def test_each_type_name_is_defined_once() -> None:
    """One name, one type: two classes of one name (there were two ``Userspace``: the version finder's
    and the publisher's sources) make a reader guess which one a signature means."""
    where: dict[str, list[str]] = {}
    for name, source in _modules():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(name)
    twice = {cls: files for cls, files in where.items() if len(files) > 1}
    assert not twice, f"classes defined more than once: {twice}"


def test_driver_version_libraries_are_named_once() -> None:
    """The version finder and the publisher's "found versions" read versions by one rule."""
    assert version_finder.VERSION_LIBS is userspace_layout.VERSION_LIBS
    assert userspace_layout.driver_versions(["libcuda.so.1", f"libcuda.so.{VERSION}", "libnvidia-ml.so.550.1"]) == [
        "550.1",
        VERSION,
    ]


def test_fixed_choices_are_literal_types() -> None:
    """Severity, the platform and the DRIVER_PLATFORM/KERNEL_MODULE_TYPE knobs are Literal types, so
    mypy strict (strict_equality) rejects a comparison with a value outside them."""
    from typing import get_args, get_type_hints

    from driver_container.base.errors import UsageError
    from driver_container.findings.model import SEVERITIES, Finding, Severity
    from driver_container.inspect.platform import PlatformInfo, PlatformKind
    from driver_container.settings import DaemonChoice, ModuleTypeChoice, PlatformChoice, RootProcfsChoice, Settings

    assert get_type_hints(Finding)["severity"] == Severity and get_args(Severity) == SEVERITIES
    assert get_type_hints(PlatformInfo)["name"] == PlatformKind
    assert get_args(PlatformKind) == ("talos", "generic")
    hints = get_type_hints(Settings)
    assert hints["driver_platform"] == PlatformChoice and hints["kernel_module_type"] == ModuleTypeChoice
    assert hints["persistenced"] == hints["fabricmanager"] == DaemonChoice
    assert Settings.from_env({"DRIVER_PLATFORM": " Talos "}).driver_platform == "talos"
    assert hints["root_procfs"] == RootProcfsChoice and Settings.from_env({}).root_procfs == "none"
    assert Settings.from_env({"DRIVER_ROOT_PROCFS": "MPS-minimal"}).root_procfs == "mps-minimal"
    with pytest.raises(UsageError, match="DRIVER_ROOT_PROCFS='full': expected one of none, mps-minimal"):
        Settings.from_env({"DRIVER_ROOT_PROCFS": "full"})


def test_other_fixed_choices_are_literal_types() -> None:
    """Publish entry and record kinds, journal steps, the DRIVER_ROOT mount decision, the fabric kind,
    the module flavour, where the userspace version was found and the Node verdict: one Literal each."""
    from typing import Literal, get_args, get_type_hints

    from driver_container.driverroot.journal import JournalAction, Step
    from driver_container.driverroot.manifest import Record, RecordType
    from driver_container.driverroot.mount import RootMountAction, RootMountDecision
    from driver_container.formats.kernel.nvidia_proc import ModuleFlavour, NvidiaProcVersion
    from driver_container.inspect.modfiles import ModuleFile
    from driver_container.inspect.userspace import UserspaceVersion, VersionSource
    from driver_container.kube.nodereport import NodeVerdict, VerdictResult
    from driver_container.publish.model import EntryKind, PlannedEntry
    from driver_container.readers.fabric import FabricInfo, FabricKind
    from driver_container.settings import ModuleTypeChoice

    fields = [
        (PlannedEntry, "kind", EntryKind),
        (Record, "type", RecordType),
        (Step, "action", JournalAction),
        (RootMountDecision, "action", RootMountAction),
        (FabricInfo, "kind", FabricKind),
        (NvidiaProcVersion, "flavour", ModuleFlavour),
        (ModuleFile, "flavour", ModuleFlavour | None),
        (UserspaceVersion, "source", VersionSource),
        (NodeVerdict, "result", VerdictResult),
    ]
    names = {"ModuleFlavour": ModuleFlavour}  # nodereport names it for type checking only (init's hot path)
    for cls, field, hint in fields:
        assert get_type_hints(cls, localns=names)[field] == hint, f"{cls.__name__}.{field}"
    for alias in (EntryKind, RecordType, JournalAction, RootMountAction, FabricKind, ModuleFlavour, VersionSource):
        assert get_args(alias) and all(isinstance(v, str) for v in get_args(alias))
    assert ModuleTypeChoice == Literal["auto", "open", "proprietary"]


def test_every_exception_class_is_in_errors_py() -> None:
    """One hierarchy: a class deriving from an exception lives in base/errors.py (kubeconfig's private
    control-flow signal excepted; it never leaves that module)."""
    exceptions = {"Exception", "ValueError", "DriverContainerError", "OSError"}
    strays = []
    for name, source in _modules():
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.ClassDef) or name == "base/errors.py":
                continue
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
            if (bases & exceptions or any(b.endswith("Error") for b in bases)) and node.name != "_Unsupported":
                strays.append(f"{name}: {node.name}")
    assert not strays, f"exception classes outside base/errors.py: {strays}"
