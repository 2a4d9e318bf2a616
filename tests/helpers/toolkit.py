"""NVIDIA's real container toolkit v1.20.0 reading a driver root: what it gives a GPU container (docs/publish.md).

Nothing here models the toolkit: its binaries (NVIDIA/nvidia-container-toolkit tag v1.20.0, commit
5505e2f94d9aaa08561490db974ba3cd676af209, built as the README beside them says) are run and their output is
only sorted into items. They stay outside the project: NVIDIA_CONTAINER_TOOLKIT_DIR, default
``<repo>/../shared/tools/nvidia-container-toolkit-1.20.0``. Two runs give the whole view of a root:

- The management spec, as gpu-operator v26.7's toolkit writes it for a driver container
  (cmd/nvidia-ctk-installer/toolkit/toolkit.go ``generateCDISpec``: ``nvcdi.ModeManagement``, the driver and
  dev roots of the validator's driver-ready file, ``<toolkit root>/nvidia-cdi-hook``, no ldconfig path):
  ``nvidia-ctk cdi generate --mode=management --driver-root=R --dev-root=D --nvidia-cdi-hook-path=H``. Its
  common edits are pkg/nvcdi/driver-nvml.go ``newDriverVersionDiscoverer``: every ``*.so.<version>`` of the
  libcuda dirs and their ``vdpau/``, ``libnvidia-nvvm70.so.*``, the binaries, GSP firmware, IPC sockets, the
  create-symlinks, enable-cuda-compat and update-ldcache hooks. The installer then rewrites the toolkit
  pod's ``/driver-root`` prefix to ``/run/nvidia/driver`` (transform/root); here the root is named by its
  host path directly, which gives the same spec.
- The graphics edits: the device plugin's workload spec (nvml mode) adds
  ``discover.NewGraphicsMountsDiscoverer`` (pkg/nvcdi/common-nvml.go: EGL/Vulkan/OpenCL configs, the EGL
  platform libraries, X driver files, their symlink hook). nvml mode needs a GPU; the same discoverer is
  what ``nvidia-container-runtime`` applies in legacy mode for ``NVIDIA_DRIVER_CAPABILITIES=all``
  (internal/modifier/graphics.go), so the runtime is run on a bundle with ``/bin/true`` as its low-level
  runtime and the config.json it wrote is read back.

Both run in a private mount namespace with a throw-away /dev (helpers.nvidia_sandbox): the toolkit
dlopens the root's libnvidia-ml (NVML reports "Driver Not Loaded") and, as root, NVIDIA's code creates
the device nodes it misses.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from helpers.nvidia_sandbox import run_nvidia
from helpers.support import REPO, require

TOOLKIT_VERSION = "1.20.0"
TOOLKIT_DIR = Path(
    os.environ.get(
        "NVIDIA_CONTAINER_TOOLKIT_DIR", REPO.parent / "shared/tools" / f"nvidia-container-toolkit-{TOOLKIT_VERSION}"
    )
)
BINARIES = ("nvidia-ctk", "nvidia-cdi-hook", "nvidia-container-runtime")
BIN_DIRS = frozenset({"/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin", "/usr/local/sbin"})
IPC = ("/nvidia-persistenced/socket", "/nvidia-fabricmanager/socket", "/tmp/nvidia-mps")
TRIPLET = re.compile(r"(x86_64|aarch64)-linux-gnu")
_LIBRARY = re.compile(r"[^/]*\.so(\.[^/]*)?")
_WARNING = re.compile(r'level=warning msg="((?:[^"\\]|\\.)*)"')


class Item(NamedTuple):
    """One thing the toolkit gives a container, named so that two roots can be compared: a library,
    binary or firmware file by its file name, a config, IPC socket or ldcache folder by its container
    path, a symlink by ``link name -> target``, a hook by its arguments; versions read ``<v>``."""

    kind: str  # library | binary | firmware | config | ipc | symlink | ldcache-folder | hook | env
    name: str


@dataclass(frozen=True)
class ToolkitView:
    root: Path
    version: str
    items: dict[Item, Path | None]  # the host file mounted for it, None for hooks, folders, env
    mounts: dict[str, Path] = field(default_factory=dict)  # container path -> host path
    links: tuple[tuple[str, str], ...] = ()  # create-symlinks (target, link) of both runs
    folders: tuple[str, ...] = ()  # update-ldcache --folder of the management spec
    management_libraries: tuple[str, ...] = ()  # container paths of the management spec's libraries
    hook_paths: frozenset[Path] = frozenset()
    warnings: frozenset[str] = frozenset()  # nvidia-ctk's warnings, root and version replaced


class Difference(NamedTuple):
    kind: str
    name: str
    published: str  # "lacks" (only the source has it), "adds" (only the published root), "differs" (content)


@functools.cache
def require_toolkit() -> Path:
    """The toolkit's directory, after checking its binaries are there and are v1.20.0."""
    present = all(os.access(TOOLKIT_DIR / name, os.X_OK) for name in BINARIES)
    require(
        present,
        f"NVIDIA container toolkit {TOOLKIT_VERSION} binaries {', '.join(BINARIES)} in {TOOLKIT_DIR}",
        how="set NVIDIA_CONTAINER_TOOLKIT_DIR to a build of NVIDIA/nvidia-container-toolkit v1.20.0",
    )
    done = subprocess.run(
        [str(TOOLKIT_DIR / "nvidia-ctk"), "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    require(f"version {TOOLKIT_VERSION}" in done.stdout, f"nvidia-ctk {TOOLKIT_VERSION} (got {done.stdout.strip()!r})")
    return TOOLKIT_DIR


def _normal(text: str, root: Path, version: str) -> str:
    return text.replace(str(root), "<root>").replace(version, "<v>")


def _named(name: str, version: str) -> str:
    """An item's name with the version and the multiarch triplet written as ``<v>`` and ``<triplet>``."""
    return TRIPLET.sub("<triplet>", name.replace(version, "<v>"))


def _warnings(stderr: str, root: Path, version: str) -> set[str]:
    found = set()
    for message in _WARNING.findall(stderr):
        text = message.encode().decode("unicode_escape").split("\n")[0]
        found.add(_normal(text, root, version))
    return found


def management_spec(root: Path, dev_root: Path, *, ldconfig_path: str | None = None) -> tuple[dict[str, Any], str]:
    """``nvidia-ctk cdi generate`` with the operator toolkit's flags for a driver container (module doc):
    the spec as JSON and nvidia-ctk's stderr. ``ldconfig_path`` adds ``--ldconfig-path`` (docs/operator.md)."""
    tools = require_toolkit()
    hook = tools / "nvidia-cdi-hook"
    argv = [
        str(tools / "nvidia-ctk"),
        "cdi",
        "generate",
        "--mode=management",
        f"--driver-root={root}",
        f"--dev-root={dev_root}",
        f"--nvidia-cdi-hook-path={hook}",
        "--format=json",
    ]
    if ldconfig_path is not None:
        argv.append(f"--ldconfig-path={ldconfig_path}")
    done = run_nvidia(argv)
    assert done.returncode == 0, done.stderr
    spec: dict[str, Any] = json.loads(done.stdout)
    return spec, done.stderr


def graphics_edits(root: Path, work: Path) -> tuple[dict[str, Any], str]:
    """What nvidia-container-runtime (legacy mode, ``NVIDIA_DRIVER_CAPABILITIES=all``) adds to an OCI spec
    from ``root``: the modified config.json and the runtime's stderr."""
    tools = require_toolkit()
    bundle = work / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    process = {"args": ["true"], "cwd": "/", "env": ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"]}
    (bundle / "config.json").write_text(
        json.dumps({"ociVersion": "1.0.2", "process": process, "root": {"path": "rootfs"}})
    )
    config = work / "config.toml"
    # The runtime's own config file (api/config/v1): the driver root, legacy mode, /bin/true as the low-level
    # runtime so that nothing runs, and the hook binary the graphics symlink hook names.
    config.write_text(
        f'[nvidia-container-cli]\nroot = "{root}"\n'
        '[nvidia-container-runtime]\nmode = "legacy"\nruntimes = ["/bin/true"]\n'
        f'[nvidia-ctk]\npath = "{tools / "nvidia-ctk"}"\n'
    )
    env = {"PATH": "/usr/bin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH": str(config)}
    done = run_nvidia([str(tools / "nvidia-container-runtime"), "create", "--bundle", str(bundle), "issue-29"], env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    spec: dict[str, Any] = json.loads((bundle / "config.json").read_text())
    return spec, done.stderr


# The control and GPU nodes of one GPU: (name, major, minor) with the majors of the Talos fixture's
# /proc/devices (nvidia 195, nvidia-uvm 509) and NVIDIA's fixed minors (NVIDIA/nvidia-container-toolkit
# v1.20.0 @ 5505e2f9 internal/info/proc/devices/devices.go).
STAND_IN_NODES = (
    ("nvidiactl", 195, 255),
    ("nvidia0", 195, 0),
    ("nvidia-modeset", 195, 254),
    ("nvidia-uvm", 509, 0),
    ("nvidia-uvm-tools", 509, 1),
)


def stand_in_dev_root(dest: Path) -> Path:
    """A dev root for a userspace that has no ``dev/``: the device nodes of one GPU, made with mknod on this
    host (no driver behind them). The management spec needs at least one node ("no NVIDIA device nodes")."""
    require(os.geteuid() == 0, "root (mknod)")
    (dest / "dev").mkdir(parents=True)
    for name, major, minor in STAND_IN_NODES:
        os.mknod(dest / "dev" / name, 0o20666, os.makedev(major, minor))
    return dest


def _kind(container_path: str) -> str:
    path = PurePosixPath(container_path)
    if container_path in IPC or any(container_path.endswith(s) for s in IPC):
        return "ipc"
    if "/firmware/" in container_path:
        return "firmware"
    if str(path.parent) in BIN_DIRS:
        return "binary"
    if _LIBRARY.fullmatch(path.name):
        return "library"
    return "config"


def _mount_item(container_path: str, version: str) -> Item:
    kind = _kind(container_path)
    name = container_path if kind in ("config", "ipc") else PurePosixPath(container_path).name
    return Item(kind, _named(name, version))


def _hook_items(hook: dict[str, Any], version: str) -> tuple[list[Item], list[tuple[str, str]], list[str]]:
    args = [str(a) for a in hook.get("args", [])]
    args = args[2:] if args[:2] == ["nvidia-ctk", "hook"] else args[1:]
    if not args:
        return [], [], []
    name, rest = args[0], args[1:]
    values = [rest[i + 1] for i in range(len(rest) - 1) if rest[i] in ("--link", "--folder")]
    if name == "create-symlinks":
        pairs = [(target, link) for target, _, link in (v.partition("::") for v in values)]
        items = [Item("symlink", _named(f"{PurePosixPath(link).name} -> {target}", version)) for target, link in pairs]
        return items, pairs, []
    if name == "update-ldcache":
        return [Item("ldcache-folder", _named(folder, version)) for folder in values], [], values
    return [Item("hook", _named(" ".join(args), version))], [], []


def toolkit_view(root: Path, dev_root: Path, version: str, work: Path) -> ToolkitView:
    """Both runs on ``root`` (a published DRIVER_ROOT or a full userspace), sorted into items."""
    spec, ctk_stderr = management_spec(root, dev_root)
    graphics, _ = graphics_edits(root, work)
    edits = spec.get("containerEdits", {})
    items: dict[Item, Path | None] = {}
    mounts: dict[str, Path] = {}
    links: list[tuple[str, str]] = []
    folders: list[str] = []
    hook_paths = set()
    graphics_mounts = [{"hostPath": m["source"], "containerPath": m["destination"]} for m in graphics.get("mounts", [])]
    graphics_hooks = [h for h in graphics.get("hooks", {}).get("createContainer", [])]
    for mount in [*edits.get("mounts", []), *graphics_mounts]:
        mounts[mount["containerPath"]] = Path(mount["hostPath"])
        items[_mount_item(mount["containerPath"], version)] = Path(mount["hostPath"])
    for hook in [*edits.get("hooks", []), *graphics_hooks]:
        hook_paths.add(Path(hook["path"]))
        found, pairs, dirs = _hook_items(hook, version)
        items.update(dict.fromkeys(found))
        links += pairs
        folders += dirs
    env = dict(v.partition("=")[::2] for v in edits.get("env", []))
    items.update(dict.fromkeys(Item("env", f"{key}={_named(value, version)}") for key, value in env.items()))
    libraries = tuple(m["containerPath"] for m in edits.get("mounts", []) if _kind(m["containerPath"]) == "library")
    return ToolkitView(
        root,
        version,
        items,
        mounts,
        tuple(links),
        tuple(folders),
        libraries,
        frozenset(hook_paths),
        frozenset(_warnings(ctk_stderr, root, version)),
    )


def _same_content(a: Path, b: Path) -> bool:
    if a.stat().st_size != b.stat().st_size:
        return False
    with a.open("rb") as fa, b.open("rb") as fb:
        while chunk := fa.read(1 << 20):
            if chunk != fb.read(len(chunk)):
                return False
    return True


def differences(source: ToolkitView, published: ToolkitView) -> set[Difference]:
    """What the toolkit gives a container from the full userspace and not from the published root, the
    reverse, and files it finds in both whose content differs."""
    found = {Difference(i.kind, i.name, "lacks") for i in source.items.keys() - published.items.keys()}
    found |= {Difference(i.kind, i.name, "adds") for i in published.items.keys() - source.items.keys()}
    for item in source.items.keys() & published.items.keys():
        a, b = source.items[item], published.items[item]
        if a is not None and b is not None and not _same_content(a, b):
            found.add(Difference(item.kind, item.name, "differs"))
    return found


def _inside(root: Path, path: Path) -> bool:
    real = Path(os.path.realpath(path))
    return real == root or root in real.parents


def path_problems(view: ToolkitView) -> list[str]:
    """What in the published root's spec would fail or dangle in a container: a host path that does not
    exist or leaves the root, a hook binary that is missing, a symlink whose target nothing provides,
    a library in a folder the ldcache hook does not add."""
    problems = []
    root = Path(os.path.realpath(view.root))
    for container_path, host in sorted(view.mounts.items()):
        if not host.exists():
            problems.append(f"{container_path}: {host} does not exist")
        elif not _inside(root, host):
            problems.append(f"{container_path}: {host} resolves outside the root, to {os.path.realpath(host)}")
    problems += [f"hook {path} is not executable" for path in sorted(view.hook_paths) if not os.access(path, os.X_OK)]
    provided = set(view.mounts) | {link for _, link in view.links}
    for target, link in view.links:
        resolved = os.path.normpath(target if target.startswith("/") else PurePosixPath(link).parent / target)
        if resolved not in provided:
            problems.append(f"symlink {link} -> {target}: nothing in the container at {resolved}")
    unlisted = [lib for lib in view.management_libraries if str(PurePosixPath(lib).parent) not in view.folders]
    problems += [f"library {lib}: its folder is not in update-ldcache's --folder list" for lib in unlisted]
    return problems
