"""The package layout's rules that import-linter cannot see (docs/architecture.md, issue 15).

- The library search dirs, the ld.so.cache path and its 64-bit entry flags have one definition each
  (formats/userspace_layout.py, formats/ldcache.py): the version finder and the publisher read one image,
  so a second copy of these facts could make them disagree about it.
- A function-local import is allowed only where it keeps a measured hot path light, and says which.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path, PurePosixPath

import pytest
import typer.main

import driver_container
from driver_container.cli.app import app
from driver_container.formats import userspace_layout
from driver_container.inspect import userspace as version_finder
from driver_container.paths import HOST_ROOTS, HostPaths, Root
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
    "module/firmware_class/parameters/path": {"node/firmware.py"},
}
CACHE_FLAGS_64 = {0x0303, 0x0A03}  # glibc dl-cache.h FLAG_X8664_LIB64, FLAG_AARCH64_LIB64 (with FLAG_ELF_LIBC6)


def _modules() -> list[tuple[str, str]]:
    return [(str(p.relative_to(PACKAGE)), p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))]


def _code_strings(source: str) -> list[str]:
    """String literals (f-string parts included) that are code, not docstrings."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        n.value for n in ast.walk(tree)
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
        for name, source in _modules() if name != "formats/ldcache.py"
        for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and n.value in CACHE_FLAGS_64
        and type(n.value) is int
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
    undocumented = []
    for name, source in _modules():
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
    assert not undocumented, "function-local imports without a hot-path reason: " + ", ".join(undocumented)


def test_modules_stay_small() -> None:
    """~300 lines a module (the developers' guide)."""
    long = [f"{name} ({len(source.splitlines())})" for name, source in _modules() if len(source.splitlines()) > 300]
    assert not long, f"modules over ~300 lines: {long}"


def test_host_roots_are_declared_once() -> None:
    """paths.HOST_ROOTS names every HostPaths root, and the global CLI options are exactly its rows."""
    fields = set(HostPaths._fields)
    assert {r.field for r in HOST_ROOTS} == fields
    command = typer.main.get_command(app)
    envvars = {p.envvar for p in command.params if p.envvar} - {"LOG_FORMAT", "VERBOSE"}
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
    found = version_finder.find_userspace(HostPaths(userspace_root=root))
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
        "550.1", VERSION
    ]


def test_fixed_choices_are_literal_types() -> None:
    """Severity, the platform and the DRIVER_PLATFORM/KERNEL_MODULE_TYPE knobs are Literal types, so
    mypy strict (strict_equality) rejects a comparison with a value outside them."""
    from typing import get_args, get_type_hints

    from driver_container.findings.model import SEVERITIES, Finding, Severity
    from driver_container.inspect.platform import PlatformInfo, PlatformKind
    from driver_container.settings import DaemonChoice, ModuleTypeChoice, PlatformChoice, Settings

    assert get_type_hints(Finding)["severity"] == Severity and get_args(Severity) == SEVERITIES
    assert get_type_hints(PlatformInfo)["name"] == PlatformKind
    assert get_args(PlatformKind) == ("talos", "generic")
    hints = get_type_hints(Settings)
    assert hints["driver_platform"] == PlatformChoice and hints["kernel_module_type"] == ModuleTypeChoice
    assert hints["persistenced"] == hints["fabricmanager"] == DaemonChoice
    assert Settings.from_env({"DRIVER_PLATFORM": " Talos "}).driver_platform == "talos"


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
    from driver_container.node.fabric import FabricInfo, FabricKind
    from driver_container.publish.model import EntryKind, PlannedEntry
    from driver_container.settings import ModuleTypeChoice

    fields = [
        (PlannedEntry, "kind", EntryKind), (Record, "type", RecordType), (Step, "action", JournalAction),
        (RootMountDecision, "action", RootMountAction), (FabricInfo, "kind", FabricKind),
        (NvidiaProcVersion, "flavour", ModuleFlavour), (ModuleFile, "flavour", ModuleFlavour | None),
        (UserspaceVersion, "source", VersionSource), (NodeVerdict, "result", VerdictResult),
    ]  # fmt: skip
    names = {"ModuleFlavour": ModuleFlavour}  # nodereport names it for type checking only (init's hot path)
    for cls, field, hint in fields:
        assert get_type_hints(cls, localns=names)[field] == hint, f"{cls.__name__}.{field}"
    for alias in (EntryKind, RecordType, JournalAction, RootMountAction, FabricKind, ModuleFlavour, VersionSource):
        assert get_args(alias) and all(isinstance(v, str) for v in get_args(alias))
    assert ModuleTypeChoice == Literal["auto", "open", "proprietary"]


def test_every_exception_class_is_in_errors_py() -> None:
    """One hierarchy: a class deriving from an exception lives in errors.py (kubeconfig's private
    control-flow signal excepted; it never leaves that module)."""
    exceptions = {"Exception", "ValueError", "DriverContainerError", "OSError"}
    strays = []
    for name, source in _modules():
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.ClassDef) or name == "errors.py":
                continue
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
            if (bases & exceptions or any(b.endswith("Error") for b in bases)) and node.name != "_Unsupported":
                strays.append(f"{name}: {node.name}")
    assert not strays, f"exception classes outside errors.py: {strays}"
