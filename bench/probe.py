"""Wall time of `nvidia-driver probe_nvidia_peermem` (the peermem liveness probe, run every 30 s)
against a bare interpreter start (`python -c pass`), measured in the same run. Target: ratio <= 1.5.

The baseline is the cheapest possible Python process: the probe's console script never imports typer
(cli._probe_fast_path), so comparing with `import typer` would pass by construction. Also measures the
probe called directly (`driver_container.lifecycle.peermem.probe`), i.e. the cost of the script wrapper.

Usage: python bench/probe.py [--runs N] [--json]
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

REPO = Path(__file__).resolve().parent.parent
PROC = REPO / "tests/unit/node/fixtures/peermem-loaded/proc"
FAST = (
    "import sys\nfrom driver_container.lifecycle.peermem import probe\nfrom driver_container.paths import HostPaths\n"
    "sys.exit(0 if probe(HostPaths.from_env())[0] else 1)"
)


def _once(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def _measure(cases: dict[str, list[str]], env: dict[str, str], runs: int) -> dict[str, list[float]]:
    """Round-robin over the cases, so that load from other processes hits all of them alike."""
    for argv in cases.values():
        _once(argv, env)  # warm the page cache
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, argv in cases.items():
            samples[name].append(_once(argv, env))
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    env = {**os.environ, "PROCFS_ROOT": str(PROC)}
    script = shutil.which("nvidia-driver", path=str(Path(sys.executable).parent)) or "nvidia-driver"
    cases = {
        "python_pass": [sys.executable, "-c", "pass"],
        "probe_cli": [script, "probe_nvidia_peermem"],
        "probe_fast_path": [sys.executable, "-c", FAST],
    }
    samples = _measure(cases, env, args.runs)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    minima = {name: min(values) for name, values in samples.items()}
    base = medians["python_pass"]
    result = {
        "runs": args.runs,
        "median_s": {k: round(v, 4) for k, v in medians.items()},
        "min_s": {k: round(v, 4) for k, v in minima.items()},
        "ratio_cli": round(medians["probe_cli"] / base, 2),
        "ratio_fast_path": round(medians["probe_fast_path"] / base, 2),
        "target_ratio": 1.5,
        "baseline": "python -c pass",
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for name, value in medians.items():
            print(f"{name:16s} {value * 1000:7.1f} ms median, {minima[name] * 1000:7.1f} ms min ({args.runs} runs)")
        print(f"ratio probe_cli / python -c pass:       {result['ratio_cli']:.2f}  (target <= 1.5)")
        print(f"ratio probe_fast_path / python -c pass: {result['ratio_fast_path']:.2f}")
    return 0 if result["ratio_cli"] <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
