"""The files a report copies as they are: RUN_DIR's state, DRIVER_ROOT's manifest, the module facts of
/proc and /sys, the platform's identity. Each is a member named after where it lives (``run/...``,
``driver-root/...``, ``host/proc/...``, ``host/sys/...``, ``image/...``), read bounded (reading.py).

Never read: /proc/cmdline (a Talos node carries its machine config's credentials and Omni's join token
there; the kernel's own copies of it in its log are reduced by formats/redact.py), the service account's
token, any kubeconfig, the environment (environment.py keeps an allow-list of names).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from driver_container.base.paths import HostPaths
from driver_container.base.resolver import Root
from driver_container.driverroot.manifest import MANIFEST_PATH
from driver_container.inspect.verdict import VERDICT_FILE
from driver_container.report.model import Member
from driver_container.report.reading import SMALL_CAP, entries, file_member, read_capped, source_of, walk
from driver_container.runtime.logfile import LOG_CAP, LOG_FILE, ROTATED_LOG_FILE
from driver_container.runtime.statusfiles import DAEMONS_STATUS, MAX_VERIFY_RECORD, PUBLISH_FAILED

MANIFEST_CAP = 4 << 20  # ~170 records of ~250 bytes for a real root; far below
# RUN_DIR's files (docs/init.md, runtime/statusfiles.py, inspect/verdict.py) and their caps.
RUN_FILES = (
    (f"validations/{DAEMONS_STATUS}", 4096),
    ("nvidia-driver.state", 4096),
    ("nvidia-driver.pid", 4096),
    (PUBLISH_FAILED, 16 << 10),
    (VERDICT_FILE, 1 << 20),
    ("nvidia-driver.verify.json", MAX_VERIFY_RECORD),
)
LOG_FILES = (ROTATED_LOG_FILE, LOG_FILE)  # oldest first
MODULE_ATTRS = ("version", "srcversion", "taint", "refcnt", "initstate")
NVIDIA_PROC = ("driver/nvidia/version", "driver/nvidia/params", "driver/nvidia/registry")
PLATFORM_PROC = ("version", "sys/kernel/tainted")  # the release: status.json's platform.kernel_release


def run_dir_members(run: Root) -> list[Member]:
    members = [file_member(run, inner, f"run/{inner}", cap) for inner, cap in RUN_FILES]
    names, why = entries(run, "validations")
    listing = "".join(f"{n}\n" for n in names).encode() if names or not why else None
    members.append(Member("run/validations.list", source_of(run, "validations"), listing, why))
    return members


def log_members(run: Root) -> list[Member]:
    """init's own log (runtime/logfile.py); read past its cap so that ``admit`` keeps the newest lines."""
    return [file_member(run, name, f"run/{name}", 2 * LOG_CAP) for name in LOG_FILES]


def manifest_member(driver_root: Path) -> Member:
    return file_member(Root(driver_root), MANIFEST_PATH, f"driver-root/{MANIFEST_PATH.name}", MANIFEST_CAP)


def platform_members(paths: HostPaths) -> list[Member]:
    os_release = paths.host_os_release
    members = [file_member(Root(os_release.parent), os_release.name, "host/os-release")]
    members += [file_member(paths.proc, inner, f"host/proc/{inner}") for inner in PLATFORM_PROC]
    members.append(file_member(paths.userspace, "etc/os-release", "image/os-release"))
    return members


def module_members(paths: HostPaths) -> list[Member]:
    """/proc/modules' NVIDIA lines, /sys/module/nvidia*, /proc/driver/nvidia (GPUs, capabilities)."""
    members = [_proc_modules(paths.proc)]
    names, why = entries(paths.sys, "module")
    modules = [n for n in names if n.startswith("nvidia")]
    if not modules:
        members.append(Member("host/sys/module", source_of(paths.sys, "module"), None, why or "no nvidia* module"))
    for module in modules:
        base = f"module/{module}"
        members += [file_member(paths.sys, f"{base}/{a}", f"host/sys/{base}/{a}") for a in MODULE_ATTRS]
        params, _why = entries(paths.sys, f"{base}/parameters")
        members += [file_member(paths.sys, f"{base}/parameters/{p}", f"host/sys/{base}/parameters/{p}") for p in params]
    members += [file_member(paths.proc, inner, f"host/proc/{inner}") for inner in NVIDIA_PROC]
    gpus, _why = entries(paths.proc, "driver/nvidia/gpus")
    for gpu in gpus:
        inner = f"driver/nvidia/gpus/{gpu}/information"
        members.append(file_member(paths.proc, inner, f"host/proc/{inner}"))
    members.append(_capabilities(paths.proc))
    return members


def _proc_modules(proc: Root) -> Member:
    data, why = read_capped(proc, "modules", 1 << 20)
    if data is not None:
        data = b"".join(line for line in data.splitlines(keepends=True) if b"nvidia" in line or b"gdrdrv" in line)
    return Member("host/proc/modules.nvidia", source_of(proc, "modules"), data, why)


def _capabilities(proc: Root) -> Member:
    """One listing of /proc/driver/nvidia/capabilities: each file's path and text (MIG nodes' modes)."""
    top = "driver/nvidia/capabilities"
    source = source_of(proc, top)
    if not proc.is_dir(top):
        return Member("host/proc/driver/nvidia/capabilities.list", source, None, "absent")
    lines = []
    for path in walk(proc, top):
        data, why = read_capped(proc, path, SMALL_CAP)
        text = why if data is None else data.decode("utf-8", "replace").strip().replace("\n", "; ")
        lines.append(f"{PurePosixPath(path).relative_to(top)}: {text}\n")
    return Member("host/proc/driver/nvidia/capabilities.list", source, "".join(lines).encode())
