"""The suite's machine guard (a pytest plugin, loaded by tests/conftest.py): a test that writes outside its
temporary directories fails, naming the path and how it was written.

Three nets, each for what the others miss:
- In the pytest process, an audit hook (helpers/writeguard.py) sees every ``open`` for writing,
  ``mkdir``, ``rename``, ``unlink``... of an absolute path and every mount(8)/umount(8) it starts, and
  refuses those outside the allowed roots (before the system call: nothing is touched) while a test runs.
- In the Python children a test starts (the CLI as a process), the same hook, loaded by a
  ``sitecustomize`` in a session directory put first on PYTHONPATH; they append what they were refused
  to a log the test's teardown reads.
- The production roots the entrypoint writes (``HostPaths()``'s defaults: RUN_DIR with DRIVER_ROOT, the
  Fabric Manager run dir, and the sysfs firmware search path) are compared before and after each test,
  for what no hook sees: writes through a directory descriptor, by a non-Python child, by openat2.

Allowed: the temporary directory (``tempfile.gettempdir()``, where pytest's ``tmp_path`` lives) and
``--basetemp``, ``/dev/null``, the repository's ``.cache/`` (build outputs), ``.hypothesis/`` and
coverage data files, bytecode. Forbidden whatever else allows it: the production roots, /etc, /proc,
the repository's package and fixtures.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from driver_container.base.paths import HostPaths
from driver_container.formats.kernel.sysfs import FIRMWARE_PATH_PARAM
from helpers import writeguard

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT_LIMIT = 2000  # entries listed per production root (a published root has ~400)
# The proof's own session (tests/unit/project/test_machine_guard.py) points the snapshot at a temporary
# directory with this variable: the production roots are never written to prove the guard.
SNAPSHOT_ROOTS_ENV = "WRITE_GUARD_SNAPSHOT_ROOTS"
SITE = """import writeguard
writeguard.install_in_child({config!r})
"""


def production_roots() -> list[Path]:
    """What the entrypoint writes on a node, from its own defaults (base/paths.py): compared around each test."""
    override = os.environ.get(SNAPSHOT_ROOTS_ENV)
    if override:
        return [Path(p) for p in override.split(os.pathsep)]
    defaults = HostPaths()
    return [defaults.run_dir, defaults.fabric_run_dir, defaults.sysfs_root / FIRMWARE_PATH_PARAM]


def guard_roots(config: pytest.Config) -> list[str]:
    """The allowed roots, then the forbidden ones ("-" first: writeguard.is_allowed)."""
    temp = {tempfile.gettempdir(), os.path.realpath(tempfile.gettempdir())}
    if config.option.basetemp:
        temp.add(os.path.abspath(config.option.basetemp))
    allowed = [*sorted(temp), os.devnull, str(REPO / ".cache"), str(REPO / ".hypothesis"), str(REPO / ".coverage*")]
    defaults = HostPaths()
    forbidden = {
        *(str(r) for r in production_roots()),
        *(str(p) for p in (defaults.run_dir, defaults.fabric_run_dir, defaults.sysfs_root, defaults.drivers_conf_dir)),
        str(defaults.procfs_root),
        "/etc",
        str(REPO / "driver_container"),
        str(REPO / "tests" / "fixtures"),
    }
    return allowed + [f"-{path}" for path in sorted(forbidden)]


def _snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Each entry below ``root`` (not followed through links): kind, size, mtime, inode; a file's first
    4 KiB where it is a sysfs attribute (its mtime does not move on write)."""
    try:
        top = os.lstat(root)
    except OSError:
        return {}
    if not stat.S_ISDIR(top.st_mode):
        return {str(root): (top.st_mode, top.st_size, top.st_mtime_ns, top.st_ino, _head(root))}
    seen: dict[str, tuple[object, ...]] = {}
    for entry in _walk(root):
        st = os.lstat(entry)
        seen[str(entry)] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)
        if len(seen) >= SNAPSHOT_LIMIT:
            break
    return seen


def _walk(root: Path) -> Iterator[Path]:
    yield root
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            yield Path(dirpath, name)


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as attribute:
            return attribute.read(4096)
    except OSError:
        return b""


class MachineGuard:
    """One per session: the hook's switch and record, the children's log, the snapshots of one test."""

    def __init__(self, config: pytest.Config) -> None:
        self.roots = guard_roots(config)
        self.active: tuple[str, ...] | None = None
        self.refused: list[str] = []
        self.site = Path(tempfile.mkdtemp(prefix="write-guard-"))
        self.log = self.site / "refused.log"
        self.log_seen = 0
        self.before: dict[str, dict[str, tuple[object, ...]]] = {}
        self.saved_pythonpath = os.environ.get("PYTHONPATH")

    def start(self) -> None:
        shutil.copy2(writeguard.__file__, self.site / "writeguard.py")
        config = self.site / writeguard.CONFIG_NAME
        config.write_text("\n".join([str(self.log), *self.roots]) + "\n")
        (self.site / "sitecustomize.py").write_text(SITE.format(config=str(config)))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.site), self.saved_pythonpath]))
        writeguard.install(lambda: self.active, lambda event, path: self.refused.append(f"{event} {path}"))

    def stop(self) -> None:
        self.active = None
        if self.saved_pythonpath is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = self.saved_pythonpath
        shutil.rmtree(self.site, ignore_errors=True)

    def begin(self) -> None:
        self.refused.clear()
        self.log_seen = self.log.stat().st_size if self.log.exists() else 0
        self.before = {str(root): _snapshot(root) for root in production_roots()}
        self.active = tuple(self.roots)

    def violations(self) -> list[str]:
        """What was refused since the last look (this process, then its children), and every production
        root changed since then."""
        found = [f"refused {line}" for line in self.refused]
        self.refused.clear()
        if self.log.exists():
            with open(self.log, "rb") as log:
                log.seek(self.log_seen)
                fresh = log.read()
            self.log_seen += len(fresh)
            found += [f"refused in a child: {line}" for line in fresh.decode(errors="replace").splitlines()]
        for root, before in self.before.items():
            after = self.before[root] = _snapshot(Path(root))
            changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
            found += [f"changed {path} (a production root, {root})" for path in changed[:10]]
        return found


SHOWN = 20  # distinct violations listed; the count is exact


def _fail(item: pytest.Item, violations: list[str]) -> None:
    distinct = list(dict.fromkeys(violations))
    shown = "\n  ".join(distinct[:SHOWN])
    more = f"\n  and {len(distinct) - SHOWN} more" if len(distinct) > SHOWN else ""
    pytest.fail(f"{item.nodeid} wrote outside its temporary roots:\n  {shown}{more}", pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
    guard = MachineGuard(config)
    guard.start()
    config.stash[GUARD] = guard


def pytest_unconfigure(config: pytest.Config) -> None:
    guard = config.stash.get(GUARD, None)
    if guard is not None:
        guard.stop()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    item.config.stash[GUARD].begin()
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    result = yield  # a test that failed is reported as it failed; its writes at its teardown
    violations = item.config.stash[GUARD].violations()
    if violations:
        _fail(item, violations)
    return result


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    guard = item.config.stash[GUARD]
    try:
        result = yield
    finally:
        guard.active = None
    violations = guard.violations()
    if violations:
        _fail(item, violations)
    return result


GUARD = pytest.StashKey[MachineGuard]()
