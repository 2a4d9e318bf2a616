"""All benchmarks of the project in one table: measured value, target, PASS/FAIL (docs/development.md).

    .venv/bin/python bench/run_all.py [--quick] [--json] [--image IMAGE]

The first rows are whole processes against floors measured in the same run, in pairs
(bench/startup.py: first `init --no-wait`, unchanged restart, the peermem probe, `status` without and
with module files), the RSS of a waiting ``init``, and modinfo over the real module tree against kmod.
Then the in-process publish (bench/publish.py), the 100 MB modules and the image size against its
NVIDIA payload (when a Docker engine and the image exist). Each script runs as a subprocess and is
parsed from its output; a benchmark whose prerequisite is missing (e.g. the real module tree of
scripts/fetch-kernel-modules.sh) shows "n/a" with the reason. Ratios are medians of per-pair ratios;
the note gives their min-max and the CPU seconds of both sides.
--quick: fewer repeats, no 100 MB module. Exit status: 3 when a row FAILs (a target missed: the table
says by how much), 2 when a row is "n/a" under CI=true (a missing prerequisite is an error there), 1 for
a crash of this script, else 0. scripts/test.sh prints the table and fails only on 1 and 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
DEFAULT_IMAGE = "talos-nvidia-driver:535.309.01-debian"  # scripts/setup.sh builds this tag
PAYLOAD_SLACK_MB = 150.0  # docs/image.md: image <= NVIDIA payload + 150 MB


@dataclass(frozen=True)
class Row:
    name: str
    value: float | None  # None: not measured (see note)
    unit: str
    target: float
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.value is None:
            return "n/a"
        return "PASS" if self.value <= self.target else "FAIL"


def _run(argv: list[str], timeout: float) -> tuple[int, str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False)
    return done.returncode, done.stdout + done.stderr


def _why(out: str) -> str:
    lines = [line for line in out.strip().splitlines() if line.strip()]
    return lines[-1][:70] if lines else "no output"


def modinfo_rows(quick: bool) -> list[Row]:
    argv = [PY, "bench/modinfo.py", "--repeat", "2" if quick else "5", *(["--skip-big"] if quick else [])]
    _rc, out = _run(argv, 1800)
    return parse_modinfo(out, quick)


def parse_modinfo(out: str, quick: bool) -> list[Row]:
    tree = re.search(r"nvidia-driver modinfo, one .*ratio\s+([\d.]+)x\s*/\s*([\d.]+)x", out)
    note = f"CPU ratio {tree[2]}x" if tree else _why(out)
    rows = [Row("modinfo tree vs kmod (wall)", float(tree[1]) if tree else None, "x", 3.0, note)]
    for kind in ("plain", "xz", "zstd"):
        big = re.search(rf"^\s+{kind}\s.*ratio\s+([\d.]+)x \(target", out, re.M)
        note = "skipped (--quick)" if quick else ("" if big else _why(out))
        rows.append(Row(f"modinfo 100 MB {kind} vs kmod", float(big[1]) if big else None, "x", 1.5, note))
    return rows


def publish_rows(quick: bool) -> list[Row]:
    rc, out = _run([PY, "bench/publish.py"], 1200)
    return parse_publish(out, rc)


def parse_publish(out: str, rc: int) -> list[Row]:
    first = re.search(r"first publish: .*ratio ([\d.]+)", out)
    again = re.search(r"unchanged re-publish: .*ratio ([\d.]+)", out)
    rss = re.search(r"peak RSS during first publish: ([\d.]+) MB", out)
    why = "" if rc == 0 else _why(out)
    return [
        Row("publish vs cp -a + ldconfig", float(first[1]) if first else None, "x", 1.3, why),
        Row("re-publish vs cp -a + ldconfig", float(again[1]) if again else None, "x", 0.1, why),
        Row("peak RSS during publish", float(rss[1]) if rss else None, "MB", 80.0, why),
    ]


STARTUP_ROWS = {  # bench/startup.py's keys -> (row name, floor)
    "first_init": ("first init --no-wait (535)", "cp -a + ldconfig -r + import typer"),
    "restart": ("unchanged restart to Ready", "import typer"),
    "probe": ("probe_nvidia_peermem", "python -c pass"),
    "status_no_modules": ("status, no module files", "import typer"),
    "status_modules": ("status, 3 module files", "import typer"),
}
# With BENCH_VS=REF (off by default): this tree against commit REF's, paired in the same run.
STARTUP_VS_ROWS = {
    "first_init_vs": ("first init --no-wait vs {ref}", "{ref}'s first init"),
    "restart_vs": ("unchanged restart vs {ref}", "{ref}'s restart"),
}


def startup_rows(quick: bool) -> list[Row]:
    # bench/startup.py reads BENCH_VS from the environment it inherits
    rc, out = _run([PY, "bench/startup.py", "--json", "--rounds", "5" if quick else "11"], 1800)
    return parse_startup(out, rc, os.environ.get("BENCH_VS") or None)


def parse_startup(out: str, rc: int, vs: str | None = None) -> list[Row]:
    lines = [line for line in out.splitlines() if line.startswith("{")]
    try:
        result = json.loads(lines[-1]) if rc == 0 and lines else {}
    except ValueError:
        result = {}
    rows = []
    wanted = {**STARTUP_ROWS}
    if vs:
        wanted |= {key: (name.format(ref=vs), floor.format(ref=vs)) for key, (name, floor) in STARTUP_VS_ROWS.items()}
    for key, (name, floor) in wanted.items():
        r = result.get(key)
        if r is None:
            rows.append(Row(name, None, "x", 0.0, _why(out)))
            continue
        note = (
            f"vs {floor}; {r['min']:.2f}-{r['max']:.2f}; {r['wall_s'] * 1000:.0f} vs "
            f"{r['floor_wall_s'] * 1000:.0f} ms; CPU {r['cpu_s']:.3f} vs {r['floor_cpu_s']:.3f} s"
        )
        rows.append(Row(name, r["ratio"], "x", r["target"], note))
    return rows


def _status_kb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return float(line.split()[1])
    raise KeyError(key)


def rss_rows(quick: bool) -> list[Row]:
    """RSS of ``init`` waiting after a publish on the fixture Talos host (fake persistenced on PATH)."""
    # The fixture host of the tests (tests/helpers, importable as pytest's ``pythonpath = ["tests"]`` makes it
    # for the suite; appended, so it shadows no installed module).
    sys.path.append(str(REPO / "tests"))
    from helpers.hostenv import make_host

    with tempfile.TemporaryDirectory(prefix="bench-rss-") as tmp:
        h = make_host(Path(tmp) / "h")
        proc = h.start("init")
        status = h.run_dir / "validations/.driver-daemons-status"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (status.is_file() and status.read_text() == "Ready"):
            if proc.poll() is not None:
                return [Row("RSS of the waiting init", None, "MB", 25.0, _why(proc.communicate()[1]))]
            time.sleep(0.1)
        time.sleep(1.0)  # settle in the wait
        idle, parent_peak = _status_kb(proc.pid, "VmRSS") / 1024, _status_kb(proc.pid, "VmHWM") / 1024
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    child_peak = publishing_child_peak_mb(err)
    # The peak is the publishing child's (it imports pyelftools and hashes every file); the parent's
    # VmHWM only covers the waiting process. Both are reported; the target applies to the larger.
    peak = max(parent_peak, child_peak) if child_peak is not None else None
    return [
        Row("RSS of the waiting init", idle, "MB", 25.0, f"VmHWM {parent_peak:.1f} MB"),
        Row(
            "peak RSS of init's publishing child",
            peak,
            "MB",
            80.0,
            "" if child_peak is not None else "init logged no 'peak RSS' line for its child",
        ),
    ]


def publishing_child_peak_mb(stderr: str) -> float | None:
    """The child's ru_maxrss that init logs after publishing (supervise.run_in_child)."""
    match = re.search(r"publishing process \(pid \d+\): peak RSS ([\d.]+) MB", stderr)
    return float(match[1]) if match else None


def image_rows(image: str) -> list[Row]:
    """Image size minus NVIDIA payload (the bytes a publish of the image's userspace writes) <= 150 MB."""
    try:
        rc, out = _run(["docker", "image", "inspect", "--format", "{{.Size}}", image], 60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        rc, out = 1, f"docker: {exc}"
    if rc != 0:
        return [Row("image size - NVIDIA payload", None, "MB", PAYLOAD_SLACK_MB, f"{image}: {_why(out)}")]
    size_mb = int(out.strip()) / 1e6
    script = (
        "import sys, os; from pathlib import Path; from driver_container.base.paths import HostPaths;"
        "from driver_container.runtime.runner import Runner;"
        "from driver_container.publish.publisher import publish_driver_root;"
        "publish_driver_root(HostPaths(userspace_root=Path('/'), driver_root_override=Path('/tmp/d'),"
        " procfs_root=Path('/nonexistent')), sys.argv[1], Runner());"
        "print(sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk('/tmp/d') for f in fs))"
    )
    version = image.rsplit(":", 1)[-1].split("-", 1)[0]
    rc, out = _run(
        ["docker", "run", "--rm", "--entrypoint", "/opt/nvidia-driver/bin/python", image, "-c", script, version], 300
    )
    digits = re.findall(r"^(\d+)$", out, re.M)
    if rc != 0 or not digits:
        return [Row("image size - NVIDIA payload", None, "MB", PAYLOAD_SLACK_MB, f"payload: {_why(out)}")]
    payload_mb = int(digits[-1]) / 1e6
    note = f"image {size_mb:.0f} MB, payload {payload_mb:.0f} MB"
    return [Row("image size - NVIDIA payload", size_mb - payload_mb, "MB", PAYLOAD_SLACK_MB, note)]


def table(rows: list[Row]) -> str:
    lines = [f"{'benchmark':36s} {'measured':>10s}  {'target':>9s}  result  note", "-" * 120]
    for r in rows:
        value = "n/a" if r.value is None else f"{r.value:.2f} {r.unit}"
        lines.append(
            f"{r.name:36s} {value:>10s}  {'<= ' + format(r.target, 'g') + ' ' + r.unit:>9s}  {r.verdict:6s}  {r.note}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="also print one JSON line of all rows")
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    parser.add_argument("--only", choices=["startup", "rss", "modinfo", "publish", "image"], action="append")
    args = parser.parse_args(argv)
    steps: dict[str, Callable[[], list[Row]]] = {
        "startup": lambda: startup_rows(args.quick),
        "rss": lambda: rss_rows(args.quick),
        "modinfo": lambda: modinfo_rows(args.quick),
        "publish": lambda: publish_rows(args.quick),
        "image": lambda: image_rows(args.image),
    }
    rows: list[Row] = []
    for name, step in steps.items():
        if not args.only or name in args.only:
            print(f"running {name}...", file=sys.stderr, flush=True)
            rows += step()
    print(table(rows))
    if args.json:
        print(json.dumps([{**asdict(r), "result": r.verdict} for r in rows]))
    if os.environ.get("CI") == "true" and any(r.verdict == "n/a" and "--quick" not in r.note for r in rows):
        return 2
    return 3 if any(r.verdict == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
