"""Which platform the entrypoint runs on: Talos or a generic Linux host.

Talos is recognised first by the host's os-release (``ID=talos``, ``VERSION_ID=v1.13.6``, leading ``v``
kept as Talos writes it), then by kernel evidence: the release ends ``-talos`` (Talos builds with
``CONFIG_LOCALVERSION="-talos"``), ``/proc/version`` names such a release, or ``/proc/cmdline`` carries
``talos.platform=`` (set by every Talos boot loader entry). See docs/status.md.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from driver_container.base.errors import HostReadError
from driver_container.base.paths import HostPaths
from driver_container.base.problems import Problem, noted
from driver_container.base.records import NamedRecord
from driver_container.base.resolver import Root
from driver_container.formats.numbers import is_ascii_name

if TYPE_CHECKING:  # settings stays out of the peermem probe's imports (a hot path, bench/startup.py)
    from driver_container.settings import PlatformChoice

PlatformKind = Literal["talos", "generic"]  # what detection decides

log = logging.getLogger(__name__)

OS_RELEASE_LIMIT = 1 << 20  # os-release(5) files are a few hundred bytes; more is not an os-release
_PROC_VERSION_TALOS = re.compile(r"^Linux version \S+-talos\s")


class PlatformInfo(NamedRecord):
    name: PlatformKind
    talos_version: str | None
    evidence: str
    kernel_release: str | None
    os_id: str | None
    pretty_name: str | None
    problems: tuple[Problem, ...] = ()  # unreadable or malformed inputs, for findings
    os_version_id: str | None = None  # os-release VERSION_ID, whatever the OS

    @property
    def operator_os_tag(self) -> str | None:
        """What gpu-operator appends, after a ``-``, to a driver image reference that is not a digest: the
        node's os-release ``ID`` and ``VERSION_ID`` as node-feature-discovery labels them, ``VERSION_ID``'s
        major number alone for ol, rocky and rhel (NVIDIA/gpu-operator 10ee5b36 internal/state/nodepool.go
        ``getOSTag``, controllers/state_manager.go ``getGPUNodeOSInfo``): ``talosv1.13.9`` on Talos v1.13.9.
        None when either is unknown, or not a valid label value (NFD then sets no label and the operator
        renders no driver pod for the node)."""
        os_id, version = self.os_id, self.os_version_id
        if not (os_id and version and _is_label_value(os_id) and _is_label_value(version)):
            return None
        return f"{os_id}{version.split('.')[0] if os_id in _MAJOR_VERSION_ONLY else version}"


# The distributions whose OS tag keeps only VERSION_ID's major number (PlatformInfo.operator_os_tag).
_MAJOR_VERSION_ONLY = frozenset({"ol", "rocky", "rhel"})


def _is_label_value(text: str) -> bool:
    """A Kubernetes label value (k8s.io/apimachinery validation.IsValidLabelValue): at most 63 characters,
    alphanumerics with ``-``, ``_`` and ``.`` inside. The pattern is compiled on first use (re's cache): the
    peermem probe imports this module and never calls it."""
    return len(text) <= 63 and re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", text) is not None


def _unquote(value: str) -> str:
    """Shell-like unquoting as os-release(5) specifies: one quoted string, backslash escapes in quotes."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        inner = value[1:-1]
        if value[0] == '"':
            inner = re.sub(r"\\([\\$\"`])", r"\1", inner)
        return inner
    return value


def parse_os_release(text: str) -> dict[str, str]:
    """``KEY=value`` assignments of an os-release file; other lines (comments, garbage) are ignored."""
    result: dict[str, str] = {}
    for raw in text.replace("\x00", "").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip()
        if not is_ascii_name(key):
            continue
        result[key] = _unquote(value)
    return result


def _read_os_release(paths: HostPaths) -> dict[str, str] | None:
    """The fields of the host's os-release (None: no such file; HostReadError). Read inside the host root
    when it lies below it, so its symlinks (Ubuntu: ``/etc/os-release -> ../usr/lib/os-release``)
    resolve as on the host."""
    location = paths.host_os_release
    try:
        inner = location.relative_to(paths.host_root)
        root = paths.host
    except ValueError:
        root, inner = Root(location.parent), Path(location.name)
    text = root.read_text_or_none(str(inner), limit=OS_RELEASE_LIMIT)
    return None if text is None else parse_os_release(text)


def read_kernel_release(proc: Root) -> str | None:
    """``uname -r`` of the running kernel, from procfs (the container's uname is the host's too)."""
    text = proc.read_text_or_none("sys/kernel/osrelease", limit=4096)
    if text is None:
        return None
    release = text.strip()
    return release if release and release.isprintable() and " " not in release else None


def is_talos_proc_version(text: str) -> bool:
    return bool(_PROC_VERSION_TALOS.match(text))


def is_talos_cmdline(text: str) -> bool:
    return any(word.startswith("talos.platform=") for word in text.split())


def _kernel_evidence(proc: Root, release: str | None, problems: list[Problem]) -> str | None:
    if release and release.endswith("-talos"):
        return f"kernel release {release} ends with -talos"
    checks = (
        ("version", is_talos_proc_version, "/proc/version names a -talos kernel"),
        ("cmdline", is_talos_cmdline, "talos.platform= in /proc/cmdline"),
    )
    for inner, test, what in checks:
        try:
            text = proc.read_text_or_none(inner, limit=65536)
        except HostReadError as exc:
            problems.append(Problem.of(exc))
            continue
        if text is not None and test(text):
            return what
    return None


def detect_platform(paths: HostPaths, override: PlatformChoice = "auto") -> PlatformInfo:
    """Decide talos/generic and say which evidence decided (``DRIVER_PLATFORM`` ``override`` wins)."""
    problems: list[Problem] = []
    release = noted(problems, lambda: read_kernel_release(paths.proc), None)
    fields = noted(problems, lambda: _read_os_release(paths), None)
    if fields is not None and "ID" not in fields:
        problems.append(Problem(paths.host_os_release, "no ID= line (not an os-release file?)"))
    fields = fields or {}
    os_id = fields.get("ID")
    is_talos_release = os_id == "talos"
    talos_version = fields.get("VERSION_ID") if is_talos_release else None
    name: PlatformKind
    if override != "auto":
        name = override
        evidence = f"DRIVER_PLATFORM={override}"
    elif is_talos_release:
        name, evidence = "talos", "os-release ID=talos"
    else:
        kernel = _kernel_evidence(paths.proc, release, problems)
        if kernel is not None:
            name, evidence = "talos", kernel
        else:
            name = "generic"
            evidence = f"os-release ID={os_id}, no Talos kernel evidence" if os_id else "no Talos evidence"
    log.debug("platform %s (%s)", name, evidence)
    return PlatformInfo(
        name=name,
        talos_version=talos_version if name == "talos" else None,
        evidence=evidence,
        kernel_release=release,
        os_id=os_id,
        pretty_name=fields.get("PRETTY_NAME"),
        problems=tuple(problems),
        os_version_id=fields.get("VERSION_ID"),
    )
