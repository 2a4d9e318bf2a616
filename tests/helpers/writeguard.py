"""The rules of the suite's machine guard (helpers/machine_guard.py): which audit events write, and where a
test may write. Used in the pytest process and, copied beside a ``sitecustomize``, in every Python child
the tests start (the CLI as a process): so only ``os``, ``sys`` and ``errno`` are imported here, nothing a
child's start-up import checks would notice.

A write is any of the audit events of the CPython table (docs.python.org/3/library/audit_events.html)
below whose path is named absolutely (or relative to a ``dir_fd`` the event names, or to the working
directory): ``open`` with a write mode or flag, ``os.mkdir``, ``os.rename``/``os.replace``, ``os.remove``,
``os.rmdir``, ``os.symlink``, ``os.link``, ``shutil.rmtree``, ``os.chmod``, ``os.chown``,
``os.truncate``, ``os.utime``, and ``subprocess.Popen`` of mount(8) or umount(8) with its target. A path is
compared as named (normalised, links not resolved): a link planted in a temporary directory that points
out of it is the code under test's business, and its O_NOFOLLOW must not be counted as a write there.
``open`` of a relative name is not checked: its event does not say which directory (``dir_fd``) it is
relative to; the before/after snapshot of the production roots covers those (machine_guard.py).

A write outside the allowed roots is recorded and refused (PermissionError before the system call), so
a test that would touch the machine fails without touching it.
"""

from __future__ import annotations

import errno
import os
import sys

TYPE_CHECKING = False  # typing stays unimported in the children (see the module doc)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
WRITE_MODE_LETTERS = "wax+"
MOUNT_TOOLS = ("mount", "umount")
# Events whose arguments are (path, ..., dir_fd) with dir_fd last, and the positions of the paths written.
_DIR_FD_LAST = {
    "os.mkdir": (0,),
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.symlink": (1,),  # (src, dst, dir_fd): the link is made at dst; src is only its text
    "shutil.rmtree": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.utime": (0,),
}
WATCHED = frozenset(("open", "os.rename", "os.link", "os.truncate", "subprocess.Popen", *_DIR_FD_LAST))
REFUSED = "write outside the test's temporary roots, refused by the suite's machine guard (tests/conftest.py)"
CONFIG_NAME = "writeguard.conf"  # beside the children's sitecustomize: the log, then a root a line


def _text(path: object) -> str | None:
    if isinstance(path, bytes):
        return os.fsdecode(path)
    if isinstance(path, str):
        return path
    if hasattr(path, "__fspath__"):
        return str(os.fspath(path))
    return None  # a descriptor: already open


def _absolute(path: object, dir_fd: object = None) -> str | None:
    """``path`` made absolute (against ``dir_fd``'s directory or the working directory), normalised;
    None when it is a descriptor or the directory cannot be told."""
    text = _text(path)
    if text is None or text == "":
        return None
    if not os.path.isabs(text):
        try:
            # dir_fd is -1 (or None) where the call named none (Modules/posixmodule.c's DEFAULT_DIR_FD)
            usable = isinstance(dir_fd, int) and dir_fd >= 0
            base = os.readlink(f"/proc/self/fd/{dir_fd}") if usable else os.getcwd()
        except OSError:
            return None
        text = os.path.join(base, text)
    return os.path.normpath(text)


def _absolute_from(path: str, cwd: object) -> str | None:
    """A child's ``path`` made absolute against the working directory it is started in (``cwd``, resolved:
    the mount code starts mount(8) in ``/proc/self/fd/N`` of the directory it checked, with target ``.``)."""
    where = _text(cwd)
    if os.path.isabs(path) or where is None:
        return _absolute(path)
    return os.path.normpath(os.path.join(os.path.realpath(where), path))


def _opened_for_writing(args: Sequence[object]) -> bool:
    _path, mode, flags = (*args, None, None, None)[:3]
    if isinstance(mode, str) and any(letter in mode for letter in WRITE_MODE_LETTERS):
        return True
    return isinstance(flags, int) and bool(flags & WRITE_FLAGS)


def _mount_target(args: Sequence[object]) -> list[str]:
    """The target of a mount(8)/umount(8) argv: its last operand (options and their values skipped)."""
    argv = args[1] if len(args) > 1 else None
    if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)) or not argv:
        return []
    if os.path.basename(_text(argv[0]) or "") not in MOUNT_TOOLS:
        return []
    operands = [_text(a) or "" for a in argv[1:] if not (_text(a) or "").startswith("-")]
    return [operands[-1]] if operands else []


def written_paths(event: str, args: Sequence[object]) -> list[str]:
    """The absolute paths ``event`` writes (or mounts on); [] for an event that writes nothing we check."""
    found: list[str | None] = []
    if event == "open":
        path = _text(args[0]) if args else None
        if path is not None and os.path.isabs(path) and _opened_for_writing(args):
            found.append(os.path.normpath(path))
    elif event in _DIR_FD_LAST:
        dir_fd = args[-1] if len(args) > 1 else None
        found += [_absolute(args[i], dir_fd) for i in _DIR_FD_LAST[event] if i < len(args)]
    elif event in ("os.rename", "os.link"):  # (src, dst, src_dir_fd, dst_dir_fd)
        src_fd, dst_fd = (*args[2:4], None, None)[:2]
        found += [_absolute(args[0], src_fd)] if event == "os.rename" else []
        found.append(_absolute(args[1], dst_fd))
    elif event == "os.truncate":
        found.append(_absolute(args[0]))
    elif event == "subprocess.Popen":  # (executable, args, cwd, env)
        found += [_absolute_from(target, args[2] if len(args) > 2 else None) for target in _mount_target(args)]
    return [p for p in found if p is not None]


def _under(path: str, root: str) -> bool:
    if root.endswith("*"):  # the names beginning with it, in its directory (the coverage data files)
        return path.startswith(root[:-1]) and "/" not in path[len(root) - 1 :]
    return path == root or path.startswith(root.rstrip("/") + "/")


def is_bytecode(path: str) -> bool:
    """A ``__pycache__`` directory or a ``.pyc`` in one (with the importer's temporary ``.pyc.<id>`` name)."""
    name = os.path.basename(path)
    if name == "__pycache__":
        return True
    return os.path.basename(os.path.dirname(path)) == "__pycache__" and ".pyc" in name


def is_allowed(path: str, roots: Sequence[str]) -> bool:
    """Whether ``path`` (absolute, normalised) may be written: bytecode anywhere (the importer caches it
    beside the package's modules), else under none of the ``roots`` written "-<root>" (forbidden, whatever
    else allows it) and under one of the others."""
    if is_bytecode(path):
        return True
    if any(_under(path, root[1:]) for root in roots if root.startswith("-")):
        return False
    return any(_under(path, root) for root in roots if not root.startswith("-"))


def install(allowed: Callable[[], Sequence[str] | None], record: Callable[[str, str], None]) -> None:
    """Add the audit hook: while ``allowed()`` is not None, a write outside it is ``record(event, path)``-ed
    and refused. Audit hooks cannot be removed (PEP 578): ``allowed`` returning None switches it off."""
    busy = [False]

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event not in WATCHED or busy[0]:  # first: the hook sees every event (imports, sys._getframe...)
            return
        roots = allowed()
        if roots is None:
            return
        busy[0] = True  # what the hook itself does (the record's own open) is not audited again
        try:
            outside = [p for p in written_paths(event, args) if not is_allowed(p, roots)]
            for path in outside:
                record(event, path)
        finally:
            busy[0] = False
        if outside:
            raise PermissionError(errno.EACCES, REFUSED, outside[0])

    sys.addaudithook(hook)


def install_in_child(config: str) -> None:
    """For a child's ``sitecustomize``: the rules from ``config`` (the log path, then the allowed roots),
    each refused write appended to the log as "<pid> <event> <path>" for the test that started it."""
    try:
        with open(config, encoding="utf-8") as lines:
            log, *roots = lines.read().splitlines()
    except (OSError, ValueError):
        return
    frozen = tuple(roots)

    def record(event: str, path: str) -> None:
        line = f"{os.getpid()} {event} {path} ({' '.join(sys.argv)[:200]})\n"
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, line.encode(errors="replace"))
        finally:
            os.close(fd)

    install(lambda: frozen, record)
