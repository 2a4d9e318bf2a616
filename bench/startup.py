"""Whole-process start-up of the commands a node waits for, against their floors, in paired runs (docs/development.md).

    .venv/bin/python bench/startup.py [--rounds N] [--json] [--vs REF]

Each row runs its subject and its floor back to back, ROUNDS times (order alternating between rounds, so
a drift of CPU frequency or load from other processes hits both alike), and reports the median of the
per-pair wall-time ratios with their min and max, and the CPU time (user + system, children) of both.
Both sides run in the same interpreter, set up as the image's: a venv whose site-packages name the
project and its dependencies in a plain .pth file. The development venv's editable install adds an
import hook to every start (~25 ms, and pathlib and re imported by site), which would inflate every
floor and hide what the package itself imports. Subjects run a console script written as pip writes
the image's (`from driver_container.cli import main`).

- first init: `init --no-wait` into an empty DRIVER_ROOT from the real Debian 535 userspace (with the
  digest index the image build writes), against
  `cp -a` of the files it publishes + `ldconfig -r` + `python -c "import typer"`;
- restart: `init --no-wait` again on that root (unchanged), against `python -c "import typer"`;
- probe: `probe_nvidia_peermem` (peermem loaded), against `python -c pass`;
- status, no module files: `status` with an empty HOST_ROOT_MOUNT (the operator's pod), against `import typer`;
- status, 3 module files: `status` reading the fixture host's module files, against `import typer`.

The host is the fixture Talos 1.11 node with 535.309.01 loaded (tests/fixtures/hosts/talos-1.11-kmod-535);
RUN_DIR is under TMPDIR (default /dev/shm: DRIVER_ROOT is on /run, a tmpfs, in production). The package
and the interpreter's site-packages are byte-compiled first: CI sets PYTHONDONTWRITEBYTECODE=1, and the
image ships byte code, so a measurement that compiles on every start would measure the wrong thing.

--vs REF adds two rows with a previous commit as the floor, in the same run: REF's tree exported with
``git archive`` into the temporary directory (the repository is only read), in a venv built the same way,
and the first ``init --no-wait`` and the unchanged restart of this tree against REF's (same fixture host
copy and userspace, each its own RUN_DIR).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEV_PY = sys.executable
HOST = REPO / "tests/fixtures/hosts/talos-1.11-kmod-535"
USERSPACE = REPO / ".cache/artefacts/debian-nvidia-535"
VERSION = "535.309.01"
PEERMEM_PROC = REPO / "tests/fixtures/node/peermem-loaded/proc"
# pip's console script (the image's /opt/nvidia-driver/bin/nvidia-driver)
CONSOLE_SCRIPT = (
    "#!{python}\nimport sys\nfrom driver_container.cli import main\nif __name__ == '__main__':\n    sys.exit(main())\n"
)
TARGETS = {
    "first_init": 1.3,
    "restart": 1.35,
    "probe": 1.3,
    "status_no_modules": 1.5,
    "status_modules": 2.0,
    # --vs REF: this tree no slower than REF's (a ratio of 1.0 is a tie; the spread is the machine's noise)
    "first_init_vs": 1.0,
    "restart_vs": 1.0,
}

Sample = tuple[float, float]  # (wall s, CPU s of the child processes)


def bench_interpreter(work: Path, tree: Path = REPO) -> tuple[str, str]:
    """(python, nvidia-driver) of a venv like the image's (see the module doc) running the package of
    ``tree``, everything byte-compiled; the venv is ``work``/venv."""
    venv = work / "venv"
    subprocess.run([DEV_PY, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin/python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = sysconfig.get_paths()["purelib"]  # the development venv's: typer, requests, pyelftools...
    Path(purelib, "bench-startup.pth").write_text(f"{tree}\n{deps}\n")
    script = venv / "bin/nvidia-driver"
    script.write_text(CONSOLE_SCRIPT.format(python=python))
    script.chmod(0o755)
    # CI sets PYTHONDONTWRITEBYTECODE=1 and the image ships byte code: no measured start may compile.
    for compiled in (tree / "driver_container", Path(deps)):
        subprocess.run([python, "-m", "compileall", "-q", "-j0", str(compiled)], check=True, stdout=subprocess.DEVNULL)
    return python, str(script)


def timed(*argvs: list[str], env: dict[str, str] | None = None) -> Sample:
    """Run the processes one after the other; (wall, CPU) of all of them."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    for argv in argvs:
        done = subprocess.run(argv, env=env, capture_output=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{argv}: exit {done.returncode}: {done.stderr.decode()[-500:]}")
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def host_env(run_dir: Path, host_root: Path, userspace: Path, host: Path = HOST) -> dict[str, str]:
    """The image's environment on fixture host ``host``; ``init`` writes its sysfs (the firmware path), so
    pass a copy (``fixture_host_copy``), never the repository's tree."""
    return {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "TYPER_USE_RICH": "0",  # as the image's ENV
        "DRIVER_VERSION": VERSION,
        "KERNEL_MODULE_TYPE": "proprietary",
        "HOST_ROOT_MOUNT": str(host_root),
        "PROCFS_ROOT": str(host / "proc"),
        "SYSFS_ROOT": str(host / "sys"),
        "DRIVERS_CONF_DIR": str(host / "drivers"),
        "HOST_OS_RELEASE": str(host / "host/etc/os-release"),
        "USERSPACE_ROOT": str(userspace),
        "RUN_DIR": str(run_dir),
    }


def fixture_host_copy(work: Path) -> Path:
    """A private copy of the fixture host: ``init`` sets sysfs's firmware_class path in it."""
    copy = work / "fixture-host"
    shutil.copytree(HOST, copy, symlinks=True)
    return copy


def published_files(work: Path, cli: str, userspace: Path) -> tuple[list[str], str]:
    """The files a publish writes (from a first publish's manifest) and the library directory."""
    env = host_env(work / "probe-run", work / "no-host", userspace, fixture_host_copy(work))
    timed([cli, "init", "--no-wait"], env=env)
    manifest = json.loads((work / "probe-run/driver/.driver-container/manifest.json").read_text())
    files = [rec["source"] for rec in manifest["files"] if rec["type"] == "file" and rec.get("source")]
    shutil.rmtree(work / "probe-run")
    return files, f"usr/lib/{manifest['triplet']}"


def rows(rounds: int, work: Path, userspace: Path) -> dict[str, dict[str, object]]:
    python, cli = bench_interpreter(work)
    (work / "no-host").mkdir()
    files, libdir = published_files(work, cli, userspace)
    floor_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1", "TYPER_USE_RICH": "0"}
    typer_floor = [python, "-c", "import typer"]
    run_dir = work / "run"
    host = work / "fixture-host"
    env = host_env(run_dir, host / "host", userspace, host)

    def first_init() -> Sample:
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir()
        return timed([cli, "init", "--no-wait"], env=env)

    def copy_floor() -> Sample:
        dest = work / "cp"
        shutil.rmtree(dest, ignore_errors=True)
        (dest / "etc").mkdir(parents=True)
        (dest / libdir).mkdir(parents=True)
        return timed(
            ["cp", "-a", *files, str(dest / libdir)], ["ldconfig", "-r", str(dest)], typer_floor, env=floor_env
        )

    first = paired(first_init, copy_floor, rounds)

    def floor(argv: list[str]) -> Callable[[], Sample]:
        return lambda: timed(argv, env=floor_env)

    def subject(argv: list[str], subject_env: dict[str, str]) -> Callable[[], Sample]:
        return lambda: timed(argv, env=subject_env)

    restart = paired(subject([cli, "init", "--no-wait"], env), floor(typer_floor), rounds)
    probe_env = {**env, "PROCFS_ROOT": str(PEERMEM_PROC)}
    probe = paired(subject([cli, "probe_nvidia_peermem"], probe_env), floor([python, "-c", "pass"]), rounds)
    no_modules = {**env, "HOST_ROOT_MOUNT": str(work / "no-host")}
    status_none = paired(subject([cli, "status"], no_modules), floor(typer_floor), rounds)
    status_mods = paired(subject([cli, "status"], env), floor(typer_floor), rounds)
    found = {
        "first_init": first,
        "restart": restart,
        "probe": probe,
        "status_no_modules": status_none,
        "status_modules": status_mods,
    }
    return {name: {**result, "target": TARGETS[name]} for name, result in found.items()}


def exported_tree(ref: str, dest: Path) -> Path:
    """The package of commit ``ref`` under ``dest`` (``git archive``: the repository is only read)."""
    dest.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", ref, "driver_container"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def rows_vs(ref: str, rounds: int, work: Path, userspace: Path) -> dict[str, dict[str, object]]:
    """First ``init --no-wait`` and the unchanged restart of this tree (subject) against ``ref``'s (floor)."""
    (work / "this").mkdir(parents=True)
    (work / "ref").mkdir()
    _, cli = bench_interpreter(work / "this")
    _, ref_cli = bench_interpreter(work / "ref", exported_tree(ref, work / "ref/tree"))
    host = fixture_host_copy(work)
    runs = {side: work / side / "run" for side in ("this", "ref")}
    envs = {side: host_env(run_dir, host / "host", userspace, host) for side, run_dir in runs.items()}
    clis = {"this": cli, "ref": ref_cli}

    def first_init(side: str) -> Callable[[], Sample]:
        def run() -> Sample:
            shutil.rmtree(runs[side], ignore_errors=True)
            runs[side].mkdir()
            return timed([clis[side], "init", "--no-wait"], env=envs[side])

        return run

    def restart(side: str) -> Callable[[], Sample]:
        return lambda: timed([clis[side], "init", "--no-wait"], env=envs[side])

    found = {
        "first_init_vs": paired(first_init("this"), first_init("ref"), rounds),
        "restart_vs": paired(restart("this"), restart("ref"), rounds),  # each on its root of the last first init
    }
    return {name: {**result, "target": TARGETS[name], "ref": ref} for name, result in found.items()}


def paired(subject: Callable[[], Sample], floor: Callable[[], Sample], rounds: int) -> dict[str, object]:
    subject(), floor()  # warm the page cache and any first-run work (a fresh root's tmpfs mount)
    pairs: list[tuple[Sample, Sample]] = []
    for n in range(rounds):
        if n % 2:
            s = subject()
            f = floor()
        else:
            f = floor()
            s = subject()
        pairs.append((s, f))
    ratios = sorted(s[0] / f[0] for s, f in pairs)
    return {
        "ratio": round(statistics.median(ratios), 3),
        "min": round(ratios[0], 3),
        "max": round(ratios[-1], 3),
        "wall_s": round(statistics.median(s[0] for s, _ in pairs), 4),
        "floor_wall_s": round(statistics.median(f[0] for _, f in pairs), 4),
        "cpu_s": round(statistics.median(s[1] for s, _ in pairs), 4),
        "floor_cpu_s": round(statistics.median(f[1] for _, f in pairs), 4),
        "rounds": rounds,
    }


@contextlib.contextmanager
def image_userspace(prefix: str) -> Iterator[tuple[Path, Path]]:
    """(a scratch directory, the userspace as the image has it): the 535 tree with the digest index its
    build writes (a hard-linked copy beside the artefact, bench/publish.py's indexed_copy; the artefact
    itself is never written). Both are removed on exit."""
    # bench/publish.py, found through this script's directory on sys.path; imported here, not at the top,
    # so that tests/helpers/bench.py can load this module from its file for its parsers' tests.
    from publish import indexed_copy

    (REPO / ".cache").mkdir(exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix=prefix, dir=os.environ.get("TMPDIR", "/dev/shm")) as tmp,
        tempfile.TemporaryDirectory(prefix="bench-userspace-", dir=REPO / ".cache") as sources,
    ):
        yield Path(tmp), indexed_copy(USERSPACE, VERSION, Path(sources))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", "11")))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--vs", metavar="REF", default=os.environ.get("BENCH_VS") or None, help="also this tree vs REF")
    parser.add_argument("--vs-only", action="store_true", help="only the rows against REF")
    args = parser.parse_args()
    if args.vs_only and not args.vs:
        parser.error("--vs-only needs --vs REF (or BENCH_VS)")
    if not (USERSPACE / "usr").is_dir():
        print(f"no real userspace at {USERSPACE}: run scripts/setup.sh", file=sys.stderr)
        return 2
    with image_userspace("bench-startup-") as (tmp, userspace):
        (tmp / "floors").mkdir()
        result = {} if args.vs_only else rows(args.rounds, tmp / "floors", userspace)
        if args.vs:
            result |= rows_vs(args.vs, args.rounds, tmp / "vs", userspace)
    if args.json:
        print(json.dumps(result))
    else:
        for name, r in result.items():
            against = f"vs {r['ref']} " if "ref" in r else ""
            print(
                f"{name:18s} {against}ratio {r['ratio']:.2f} ({r['min']:.2f}-{r['max']:.2f}) target <= {r['target']}; "
                f"wall {r['wall_s']:.3f} s vs {r['floor_wall_s']:.3f} s; CPU {r['cpu_s']:.3f} s vs "
                f"{r['floor_cpu_s']:.3f} s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
