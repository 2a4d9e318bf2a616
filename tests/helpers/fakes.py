"""Fake modprobe/rmmod/modinfo, first on PATH, acting on a copy of a fixture host (shared by
tests/unit/modprobe and tests/integration/test_init_generic.py).

Each fake appends one line per call to ``calls.log`` (tool name and arguments, tab-separated), then
changes the copy the way the kernel would: modprobe adds a /proc/modules line and /sys/module/<m>/
(refcnt, initstate, version, holders link on nvidia, parameters); rmmod refuses a module whose refcnt
is not 0 and otherwise removes it and the reference it held. So what the code under test reads back
after its commands is observable, as on a real host.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from driver_container.base.paths import HostPaths
from driver_container.runtime.runner import Runner
from helpers.support import FIXTURES, fixture_paths

LOG = """printf "%s" "${0##*/}" >>"$FAKE_LOG"
for a in "$@"; do printf "\\t%s" "$a" >>"$FAKE_LOG"; done
echo >>"$FAKE_LOG"
"""

FAKE_MODPROBE = f"""#!/bin/sh
{LOG}
while [ $# -gt 0 ]; do case "$1" in -d) shift 2;; -*) shift;; *) break;; esac; done
name=$(echo "$1" | tr - _); shift
if [ -e "$FAKE_DIR/fail-$name" ]; then
  echo "modprobe: ERROR: could not insert '$name': No such device" >&2; exit 1
fi
grep -q "^$name " "$FAKE_PROC/modules" && exit 0
m="$FAKE_SYS/module/$name"; mkdir -p "$m/holders"
echo 0 >"$m/refcnt"; echo live >"$m/initstate"; echo "$FAKE_VERSION" >"$m/version"
echo "$name 1000 0 - Live 0x0000000000000000 (OE)" >>"$FAKE_PROC/modules"
for p in "$@"; do
  if [ "$name" = nvidia ]; then
    mkdir -p "$FAKE_PROC/driver/nvidia"
    echo "${{p%%=*}}: ${{p#*=}}" | sed 's/^NVreg_//' >>"$FAKE_PROC/driver/nvidia/params"
  else mkdir -p "$m/parameters"; echo "${{p#*=}}" >"$m/parameters/${{p%%=*}}"; fi
done
[ "$name" = nvidia ] && exit 0
# every other NVIDIA module uses nvidia's symbols: the kernel takes one reference on nvidia
n="$FAKE_SYS/module/nvidia"; echo $(( $(cat "$n/refcnt") + 1 )) >"$n/refcnt"
mkdir -p "$n/holders"; ln -s "../../$name" "$n/holders/$name"
awk -v u="$name" '$1 == "nvidia" {{ $3 = $3 + 1; $4 = ($4 == "-" ? "" : $4) u "," }} {{ print }}' \\
  "$FAKE_PROC/modules" >"$FAKE_DIR/m" && mv "$FAKE_DIR/m" "$FAKE_PROC/modules"
"""

FAKE_RMMOD = f"""#!/bin/sh
{LOG}
name=$1; m="$FAKE_SYS/module/$name"
[ -e "$m/refcnt" ] || {{ echo "rmmod: ERROR: Module $name is not currently loaded" >&2; exit 1; }}
[ "$(cat "$m/refcnt")" -eq 0 ] || {{ echo "rmmod: ERROR: Module $name is in use" >&2; exit 1; }}
rm -r "$m"
for h in "$FAKE_SYS"/module/*/holders/"$name"; do
  [ -L "$h" ] || continue; d=${{h%/holders/*}}; rm "$h"; echo $(( $(cat "$d/refcnt") - 1 )) >"$d/refcnt"
done
awk -v n="$name" '$1 == n {{ next }} {{ k = split($4, u, ","); out = ""; hit = 0
  for (i = 1; i <= k; i++) if (u[i] == n) hit = 1; else if (u[i] != "") out = out u[i] ","
  if (hit) {{ $3 = $3 - 1; $4 = (out == "" ? "-" : out) }} print }}' \\
  "$FAKE_PROC/modules" >"$FAKE_DIR/m" && mv "$FAKE_DIR/m" "$FAKE_PROC/modules"
[ "$name" = nvidia ] && rm -rf "$FAKE_PROC/driver/nvidia"
exit 0
"""

FAKE_MODINFO = f"""#!/bin/sh
{LOG}
[ -n "$FAKE_VERSION" ] || {{ echo "modinfo: ERROR: Module nvidia not found." >&2; exit 1; }}
echo "$FAKE_VERSION"
"""


@dataclass
class FakeHost:
    root: Path  # the copy of the scenario
    paths: HostPaths
    runner: Runner
    log: Path
    fake_dir: Path
    env: dict[str, str]  # PATH with the fakes first and their FAKE_* variables (for subprocesses too)

    def calls(self) -> list[list[str]]:
        """One argv per fake call, in order (empty when no fake ran)."""
        if not self.log.exists():
            return []
        return [line.split("\t") for line in self.log.read_text().splitlines()]

    def fail(self, module: str) -> None:
        """Make the fake modprobe refuse ``module`` (kernel name)."""
        (self.fake_dir / f"fail-{module}").touch()

    def proc_modules(self) -> str:
        return (self.root / "proc/modules").read_text()


def _write_fakes(fakebin: Path) -> None:
    fakebin.mkdir(parents=True, exist_ok=True)
    for name, text in (("modprobe", FAKE_MODPROBE), ("rmmod", FAKE_RMMOD), ("modinfo", FAKE_MODINFO)):
        (fakebin / name).write_text(text)
        (fakebin / name).chmod(0o755)


def make_fake_host(
    base: Path, scenario: str, *, version: str = "580.105.08", forbidden: frozenset[str] = frozenset()
) -> FakeHost:
    """Copy tests/fixtures/generic/<scenario> to base/<scenario>; fakes and their log in base/fake."""
    root = base / scenario
    shutil.copytree(FIXTURES / "generic" / scenario, root, symlinks=True)
    fake_dir = base / "fake"
    _write_fakes(fake_dir / "bin")
    log = fake_dir / "calls.log"
    env = {
        "PATH": f"{fake_dir / 'bin'}:{os.environ.get('PATH', os.defpath)}",
        "FAKE_LOG": str(log),
        "FAKE_DIR": str(fake_dir),
        "FAKE_PROC": str(root / "proc"),
        "FAKE_SYS": str(root / "sys"),
        "FAKE_VERSION": version,
    }
    paths = fixture_paths(root, userspace=root / "image")
    return FakeHost(root, paths, Runner(forbidden=forbidden, env=env), log, fake_dir, env)


FAKE_PERSISTENCED = Path(__file__).resolve().parent / "fake_persistenced.py"


def install_recording_tools(bindir: Path, calls: Path) -> None:
    """modprobe/rmmod/insmod that only record their argv (NUL-separated, one record per call, arguments
    verbatim: never evaluated by a shell) plus the fake nvidia-persistenced, for init run as a process."""
    from driver_container.runtime.runner import MODULE_TOOLS

    bindir.mkdir()
    for tool in sorted(MODULE_TOOLS):
        script = bindir / tool
        script.write_text(f"#!/bin/sh\n{{ printf '%s\\0' {tool} \"$@\"; printf '\\n'; }} >> '{calls}'\nexit 0\n")
        script.chmod(0o755)
    persistenced = bindir / "nvidia-persistenced"
    persistenced.write_text(f"#!{sys.executable}\n" + FAKE_PERSISTENCED.read_text())
    persistenced.chmod(0o755)


def recorded_calls(calls: Path) -> list[list[str]]:
    """The argv of every call recorded by ``install_recording_tools`` (empty when none ran)."""
    if not calls.exists():
        return []
    return [rec.split("\0")[:-1] for rec in calls.read_text().split("\0\n") if rec]


def fixture_host_env(root: Path, base: Path, userspace: Path, *, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """Environment for running the CLI as a process on a copied fixture host ``root`` (its ``env`` file
    applied), with RUN_DIR, fake tools (``base/bin`` first on PATH) and the fake persistenced under ``base``."""
    env = {k: v for k, v in os.environ.items() if k not in ("DRIVER_CONFIG_DIGEST", *drop)}
    for line in (root / "env").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    runtime_dir = str(base / "container/var/run/nvidia-persistenced")
    env.update(
        PATH=f"{base / 'bin'}:{os.environ['PATH']}",
        HOST_ROOT_MOUNT=str(root / "host"),
        PROCFS_ROOT=str(root / "proc"),
        SYSFS_ROOT=str(root / "sys"),
        DRIVERS_CONF_DIR=str(root / "drivers"),
        RUN_DIR=str(base / "run"),
        USERSPACE_ROOT=str(userspace),
        HOST_OS_RELEASE=str(root / "host/etc/os-release"),
        FAKE_LOG=str(base / "persistenced.log"),
        FAKE_PERSISTENCED_DIR=runtime_dir,
        NVIDIA_PERSISTENCED_RUNTIME_DIR=runtime_dir,
    )
    return env


def node_env(host: Path, userspace: Path, run_dir: Path, path: str | None = None) -> dict[str, str]:
    """A minimal environment (PATH, LANG, the host's ``env`` file, every root) for running the CLI as a
    process on fixture host ``host`` with a real ``userspace``: nothing of this process's environment
    leaks in but PATH (and PYTHONPATH where set: a worktree's tests must run that tree's code, not the
    editable install's), and no fake tool is put first."""
    env = {"PATH": path or os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    for line in (host / "env").read_text().splitlines():
        key, _, value = line.partition("=")
        if value:
            env[key.strip()] = value.strip()
    return env | {
        "HOST_ROOT_MOUNT": str(host / "host"),
        "PROCFS_ROOT": str(host / "proc"),
        "SYSFS_ROOT": str(host / "sys"),
        "DRIVERS_CONF_DIR": str(host / "drivers"),
        "HOST_OS_RELEASE": str(host / "host/etc/os-release"),
        "USERSPACE_ROOT": str(userspace),
        "RUN_DIR": str(run_dir),
    }


FAKE_FABRIC = Path(__file__).resolve().parent / "fake_fabric.py"
FAKE_NVIDIA_SMI = Path(__file__).resolve().parent / "fake_nvidia_smi.py"
# The fields of NVIDIA's fabricmanager.cfg that matter here, with the packages' defaults (not its text).
FABRICMANAGER_CFG = """# fabricmanager.cfg (test image)
LOG_LEVEL=4
LOG_FILE_NAME=/var/log/fabricmanager.log
DAEMONIZE=1
BIND_INTERFACE_IP=127.0.0.1
STARTING_TCP_PORT=16000
FABRIC_MODE=0
FM_CMD_PORT_NUMBER=6666
FM_CMD_UNIX_SOCKET_PATH=
TOPOLOGY_FILE_PATH=/usr/share/nvidia/nvswitch
"""


def _script(path: Path, source: Path, interpreter: str = sys.executable) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{interpreter}\n" + source.read_text())
    path.chmod(0o755)


def add_fabric_to_image(root: Path, *, nvlsm: bool = True, interpreter: str = sys.executable) -> None:
    """Put the fake nv-fabricmanager (and nvlsm) with their configs into an image root, where NVIDIA's
    packages install them (usr/bin, opt/nvidia/nvlsm/sbin, usr/share/nvidia/{nvswitch,nvlsm})."""
    _script(root / "usr/bin/nv-fabricmanager", FAKE_FABRIC, interpreter)
    cfg = root / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(FABRICMANAGER_CFG)
    if nvlsm:
        _script(root / "opt/nvidia/nvlsm/sbin/nvlsm", FAKE_FABRIC, interpreter)
        conf = root / "usr/share/nvidia/nvlsm/nvlsm.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text("# nvlsm.conf (test image)\n")


def install_fake_nvidia_smi(bindir: Path, interpreter: str = sys.executable) -> None:
    _script(bindir / "nvidia-smi", FAKE_NVIDIA_SMI, interpreter)


def fabric_env(base: Path) -> dict[str, str]:
    """FABRICMANAGER_RUN_DIR/LOG_DIR under ``base`` and the fakes' FAKE_DIR/FAKE_FABRIC_RUN_DIR."""
    run, logs, fake = base / "run-nvidia-fabricmanager", base / "var-log", base / "fake-fabric"
    for d in (run, logs, fake):
        d.mkdir(parents=True, exist_ok=True)
    return {
        "FABRICMANAGER_RUN_DIR": str(run),
        "FABRICMANAGER_LOG_DIR": str(logs),
        "FAKE_DIR": str(fake),
        "FAKE_FABRIC_RUN_DIR": str(run),
    }
