"""Atomic, contained writes and bounded, non-blocking reads. Every write to the host goes through here.

Containment is enforced with file descriptors, never by checking strings after the fact: a path below a
root is first checked to be relative and free of ``..`` (``check_relative``), then walked one component
at a time from a descriptor of the root with ``O_DIRECTORY|O_NOFOLLOW`` (``open_dir``), and every
create, rename, unlink and listing uses ``dir_fd=``. A symlink, file or special file where a directory
is expected is refused (ELOOP/ENOTDIR), never followed and never deleted, so nothing outside the root
can be reached whatever a hostile image or a previous root holds.

A file is written to a temporary name in its target directory (``O_EXCL|O_NOFOLLOW``), then renamed over
the target, so a reader sees the old or the new content, never a part (rename(2) is atomic within a
filesystem). Sources are opened ``O_NONBLOCK|O_NOFOLLOW``, checked with fstat to be regular files, and
copied no further than the size fstat gave (a FIFO cannot hang, a device cannot copy without end).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from driver_container.base.errors import PublishError
from driver_container.base.fileread import converted, open_nofollow, refuse_irregular, why

log = logging.getLogger(__name__)

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NAME_MAX = 255  # Linux NAME_MAX (include/uapi/linux/limits.h)


def check_relative(rel: str | PurePosixPath, *, what: str = "published path") -> PurePosixPath:
    """``rel`` as a relative path without ``..``, empty, over-long or NUL components (pure)."""
    text = str(rel)
    parts = [p for p in text.split("/") if p not in ("", ".")]
    problem = ""
    if text.startswith("/"):
        problem = "is absolute"
    elif "\0" in text:
        problem = "contains a NUL byte"
    elif ".." in parts:
        problem = "contains '..'"
    elif any(len(p.encode("utf-8", "surrogateescape")) > NAME_MAX for p in parts):
        problem = f"has a component longer than {NAME_MAX} bytes"
    if problem:
        shown = text if len(text) <= 200 else text[:200] + "..."
        raise PublishError(
            f"{what} {shown!r} {problem}", path=text, fix="the image's paths must stay inside the driver root"
        )
    if isinstance(rel, PurePosixPath):
        return rel  # already normalised ("." and "//" dropped) and checked: no second parse (hot in plans)
    return PurePosixPath(*parts) if parts else PurePosixPath()


def relative_to(root: Path, target: Path) -> PurePosixPath:
    try:
        return check_relative(PurePosixPath(target.relative_to(root)))
    except ValueError as exc:
        raise PublishError(f"{target}: outside its root {root}", path=target) from exc


def open_dir(root: Path, rel: str | PurePosixPath, *, create: bool = False) -> int:
    """A descriptor of ``root/rel`` reached component by component without following any link.

    ``create`` makes missing directories (0755). A link, file or special file in the way is refused.
    """
    parts = check_relative(rel).parts
    try:
        if create:
            os.makedirs(root, 0o755, exist_ok=True)  # the root itself is configuration (RUN_DIR, DRIVER_ROOT)
        fd = os.open(root, DIR_FLAGS)
    except OSError as exc:
        raise PublishError(f"{root}: cannot open: {why(exc)}", path=root) from exc
    here = root
    for part in parts:
        here = here / part
        try:
            child = _open_child_dir(fd, part, here, create)
        finally:
            os.close(fd)
        fd = child
    return fd


def _open_child_dir(parent: int, name: str, shown: Path, create: bool) -> int:
    """Open ``name`` below ``parent``, creating it when asked."""
    try:
        try:
            child = os.open(name, DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent)
            child = os.open(name, DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError as exc:
        raise PublishError(f"{shown}: no such directory", path=shown) from exc
    except OSError as exc:
        st = lstat_at(parent, name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise PublishError(f"{shown}: is a symlink; refusing to write through it", path=shown) from exc
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise PublishError(f"{shown}: exists and is not a directory", path=shown, fix=f"remove {shown}") from exc
        raise PublishError(f"{shown}: cannot open directory: {why(exc)}", path=shown) from exc
    return child


@contextlib.contextmanager
def opened_dir(root: Path, rel: str | PurePosixPath, *, create: bool = False) -> Iterator[int]:
    fd = open_dir(root, rel, create=create)
    try:
        yield fd
    finally:
        os.close(fd)


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return None


def ensure_dir(root: Path, rel: PurePosixPath) -> Path:
    """Create ``root/rel`` component by component without following links; refuses anything in the way."""
    os.close(open_dir(root, rel, create=True))
    return root.joinpath(*rel.parts)


def sweep_at(dir_fd: int, is_leftover: Callable[[str], bool], shown: Path) -> int:
    """Unlink the entries of one directory named as ``is_leftover`` says, except subdirectories (a link
    is removed, never followed). Returns how many."""
    removed = 0
    with os.scandir(dir_fd) as entries:
        names = [e.name for e in entries if not e.is_dir(follow_symlinks=False) and is_leftover(e.name)]
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)
            removed += 1
            log.info("removing leftover temporary %s", shown / name)
    return removed


def _temporary_name(target_name: str, suffix: str) -> str:
    # os.urandom, not secrets.token_hex (the same bytes): importing secrets loads hmac, hashlib and
    # OpenSSL, ~9 ms of every start (bench/startup.py).
    return f".{target_name[: NAME_MAX - 40]}.{os.urandom(6).hex()}{suffix}"


def create_temporary(dir_fd: int, target_name: str, suffix: str) -> tuple[int, str]:
    for _ in range(100):
        name = _temporary_name(target_name, suffix)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            return os.open(name, flags, 0o600, dir_fd=dir_fd), name
        except FileExistsError:
            continue
    raise PublishError(f"cannot create a temporary for {target_name}", path=target_name)


def split_target(target: Path, root: Path | None) -> tuple[Path, PurePosixPath]:
    """(root, relative target); without a root, the target's directory is the root (created if needed)."""
    if root is None:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PublishError(f"{target}: cannot create: {why(exc)}", path=target) from exc
        return target.parent, PurePosixPath(target.name)
    rel = relative_to(root, target)
    if not rel.parts:
        raise PublishError(f"{target}: is its root {root}", path=target)
    return root, rel


def atomic_write(target: Path, data: bytes, *, mode: int = 0o644, root: Path | None = None) -> None:
    """Write ``data`` to ``target`` atomically (temp file + fsync + rename); creates parent directories."""
    base, rel = split_target(target, root)
    with opened_dir(base, rel.parent, create=True) as dfd:
        prefix = f".{rel.name}."
        with contextlib.suppress(OSError):  # a killed earlier write of this target (writers hold the lock)
            sweep_at(dfd, lambda n: n.startswith(prefix) and n.endswith(".tmp"), target.parent)
        try:
            fd, tmp = create_temporary(dfd, rel.name, ".tmp")
        except OSError as exc:
            raise PublishError(f"{target}: cannot create: {why(exc)}", path=target) from exc
        try:
            try:
                write_all(fd, data)
                os.fchmod(fd, mode)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, rel.name, src_dir_fd=dfd, dst_dir_fd=dfd)
            os.fsync(dfd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise PublishError(f"{target}: cannot write: {why(exc)}", path=target) from exc


def sweep_temporaries(target: Path) -> int:
    """Remove the temporaries an interrupted ``atomic_write`` of ``target`` (no ``root``) left beside it."""
    prefix = f".{target.name}."
    try:
        fd = os.open(target.parent, DIR_FLAGS)
    except FileNotFoundError:
        return 0
    try:
        return sweep_at(fd, lambda n: n.startswith(prefix) and n.endswith(".tmp"), target.parent)
    finally:
        os.close(fd)


def atomic_write_text(target: Path, text: str, *, mode: int = 0o644, root: Path | None = None) -> None:
    atomic_write(target, text.encode(), mode=mode, root=root)


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def open_regular(
    path: Path | str, *, shown: str | None = None, dir_fd: int | None = None
) -> tuple[int, os.stat_result]:
    """Open a file for reading without blocking and without following a final link; must be regular.

    O_NONBLOCK: opening a FIFO does not wait for a writer; fstat then refuses it and any device or socket
    (open(2) of a socket fails with ENXIO). Reads of a regular file are unaffected by O_NONBLOCK.
    """
    name = shown or str(path)
    with converted(name, error=PublishError, fix=f"make {name} a readable regular file"):
        fd = open_nofollow(path, dir_fd=dir_fd)
    return fd, refuse_irregular(fd, name, error=PublishError, fix=f"remove {name} or replace it with the real file")


def remove_tree_at(dir_fd: int, name: str) -> None:
    """Remove ``name`` below ``dir_fd`` and, when it is a directory, everything in it; links are removed,
    never followed (each directory is opened ``O_NOFOLLOW`` below the descriptor of its parent)."""
    st = lstat_at(dir_fd, name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    child = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    try:
        with os.scandir(child) as entries:
            names = [e.name for e in entries]
        for inner in names:
            remove_tree_at(child, inner)
    finally:
        os.close(child)
    os.rmdir(name, dir_fd=dir_fd)
