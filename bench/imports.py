"""What each command imports, and what its start costs, in a venv set up as the image's (bench/startup.py).

    .venv/bin/python bench/imports.py [--rounds N] [--json] [--modules COMMAND]

For each command a node or an operator runs: the modules imported (project, third-party, standard library),
the cumulative ``-X importtime`` of the process (the sum of its top-level imports' cumulative times, one run
with PYTHONPROFILEIMPORTTIME=1) and its wall time (median of ROUNDS runs without the profile). The host is
bench/startup.py's fixture Talos node with 535 loaded, the userspace the real Debian 535 tree with its
digest index; ``init --no-wait`` is the unchanged restart (a first publish runs before it). --modules
COMMAND prints that command's imported modules, one a line (the first column of the table names it).
tests/integration/test_startup_imports.py pins which rooms of the package each command may import.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from startup import (
    HOST,
    PEERMEM_PROC,
    USERSPACE,
    bench_interpreter,
    fixture_host_copy,
    host_env,
    image_userspace,
)

# driver-manager's console script, as pip writes it (the image's /opt/nvidia-driver/bin/driver-manager)
MANAGER_SCRIPT = (
    "#!{python}\nimport sys\nfrom driver_container.cli import manager_main\n"
    "if __name__ == '__main__':\n    sys.exit(manager_main())\n"
)
# The same console scripts, writing the names in sys.modules at exit to the file $IMPORTS_OUT: -X importtime
# misses what importlib.import_module imports itself (cli._register_commands' command modules).
LISTING = (
    "import atexit, os, sys\n"
    "atexit.register(lambda: open(os.environ['IMPORTS_OUT'], 'w').write('\\n'.join(sorted(sys.modules))))\n"
    "from driver_container.cli import {entry}\n"
    "sys.exit({entry}())\n"
)
MODULE_FILE = "usr/lib/modules/6.12.43-talos/extras/nvidia.ko"  # in the fixture host's host/ tree
TIMEOUT_S = 60


def commands(cli: str, manager: str, host: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (argv, extra environment) of each measured command."""
    return {
        "--help": ([cli, "--help"], {}),
        "init --no-wait (unchanged)": ([cli, "init", "--no-wait"], {}),
        "status": ([cli, "status"], {}),
        "version": ([cli, "version"], {}),
        "modinfo FILE": ([cli, "modinfo", str(host / "host" / MODULE_FILE)], {}),
        "probe_nvidia_peermem": ([cli, "probe_nvidia_peermem"], {"PROCFS_ROOT": str(PEERMEM_PROC)}),
        "bug-report --help": ([cli, "bug-report", "--help"], {}),
        "driver-manager --help": ([manager, "--help"], {}),
    }


def imported(stderr: str) -> tuple[list[str], float]:
    """(module names, cumulative ms of the top-level imports) of ``-X importtime``'s lines
    ``import time: self | cumulative | <indent>name`` (a nested import is indented under its importer)."""
    names: list[str] = []
    total_us = 0
    for line in stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        _self, cumulative, name = line[len("import time:") :].split("|")
        if name.strip() == "imported package":
            continue  # the header line
        names.append(name.strip())
        if not name[1:].startswith(" "):  # top level: one space after the bar, no indent
            total_us += int(cumulative)
    return names, total_us / 1000


def kinds(names: list[str], deps: Path) -> dict[str, int]:
    """How many of ``names`` are the project's, third-party (a top-level name installed in ``deps``) or stdlib."""
    third = {p.name.split(".")[0].split("-")[0] for p in deps.iterdir()}
    count = {"project": 0, "third-party": 0, "stdlib": 0}
    for name in names:
        top = name.split(".")[0]
        if top == "driver_container":
            count["project"] += 1
        elif top in third and top not in sys.stdlib_module_names:
            count["third-party"] += 1
        else:
            count["stdlib"] += 1
    return count


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{argv}: exit {done.returncode}: {done.stderr[-500:]}")
    return done


def measure(rounds: int, work: Path, userspace: Path) -> dict[str, dict[str, object]]:
    python, cli = bench_interpreter(work)
    manager = work / "venv/bin/driver-manager"
    manager.write_text(MANAGER_SCRIPT.format(python=python))
    manager.chmod(0o755)
    host = fixture_host_copy(work)
    env = host_env(work / "run", host / "host", userspace, host)
    run([cli, "init", "--no-wait"], env)  # the first publish: what follows is the unchanged restart
    deps = Path(
        run(
            [python, "-c", "import typer, pathlib; print(pathlib.Path(typer.__file__).parent.parent)"], env
        ).stdout.strip()
    )
    found: dict[str, dict[str, object]] = {}
    for name, (argv, extra) in commands(cli, str(manager), host).items():
        _, import_ms = imported(run(argv, {**env, **extra, "PYTHONPROFILEIMPORTTIME": "1"}).stderr)
        entry = "manager_main" if argv[0] == str(manager) else "main"
        listing = [python, "-c", LISTING.format(entry=entry), *argv[1:]]
        run(listing, {**env, **extra, "IMPORTS_OUT": str(work / "imports.txt")})
        names = (work / "imports.txt").read_text().split()
        walls = []
        for _ in range(rounds):
            started = time.perf_counter()
            run(argv, {**env, **extra})
            walls.append(time.perf_counter() - started)
        found[name] = {
            "modules": len(names),
            **kinds(names, deps),
            "importtime_ms": round(import_ms, 1),
            "wall_ms": round(statistics.median(walls) * 1000, 1),
            "names": sorted(names),
        }
    return found


def table(found: dict[str, dict[str, object]]) -> str:
    lines = [
        "| command | modules | project | third-party | stdlib | -X importtime (ms) | wall (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in found.items():
        lines.append(
            f"| `{name}` | {r['modules']} | {r['project']} | {r['third-party']} | {r['stdlib']} | "
            f"{r['importtime_ms']:.1f} | {r['wall_ms']:.1f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", "7")))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--modules", metavar="COMMAND", help="print COMMAND's imported modules instead")
    args = parser.parse_args()
    if not (USERSPACE / "usr").is_dir() or not HOST.is_dir():
        print(f"no real userspace at {USERSPACE}: run scripts/setup.sh", file=sys.stderr)
        return 2
    with image_userspace("bench-imports-") as (tmp, userspace):
        found = measure(args.rounds, tmp, userspace)
        shutil.rmtree(tmp / "run", ignore_errors=True)
    if args.modules:
        print("\n".join(found[args.modules]["names"]))  # type: ignore[arg-type]
    elif args.json:
        print(json.dumps({name: {k: v for k, v in r.items() if k != "names"} for name, r in found.items()}))
    else:
        print(table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
