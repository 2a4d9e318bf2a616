"""What one record class costs to create at import: ``NamedRecord`` against ``@dataclass(frozen=True, slots=True)``.

    .venv/bin/python bench/records.py [--classes N] [--repeat R]

Each side runs in a fresh interpreter (byte code cached, as in the image): it imports its base (the
project's ``records`` module, or ``dataclasses``), then creates N classes of five annotated fields with
defaults, a docstring and one property, the shape of the project's records. Prints the median of R runs
per side: the base's import and the per-class creation time, in milliseconds. bench/README.md says which
records this decides and why.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_CHILD = """
from __future__ import annotations
import sys, time
t0 = time.perf_counter()
{base_import}
t1 = time.perf_counter()
for _ in range({classes}):
    {decorator}
    class Record{base}:
        '''A record.'''
        path: str
        size: int
        mtime_ns: int
        digest: str | None = None
        tags: tuple[str, ...] = ()

        @property
        def shown(self) -> str:
            return self.path
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""

SIDES = {
    "NamedRecord": ("from driver_container.base.records import NamedRecord", "", "(NamedRecord)"),
    "dataclass(frozen, slots)": ("import dataclasses", "@dataclasses.dataclass(frozen=True, slots=True)", ""),
}


def measure(side: str, classes: int) -> tuple[float, float]:
    base_import, decorator, base = SIDES[side]
    code = _CHILD.format(base_import=base_import, decorator=decorator, base=base, classes=classes)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    imported, created = (float(x) for x in done.stdout.split())
    return imported, created


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, float]]] = {side: [] for side in SIDES}
    for _ in range(args.repeat):  # interleaved, so load from other processes hits both sides alike
        for side in SIDES:
            runs[side].append(measure(side, args.classes))
    for side, samples in runs.items():
        imported = statistics.median(s[0] for s in samples) * 1000
        per_class = statistics.median(s[1] for s in samples) * 1000 / args.classes
        print(f"{side:26s} import {imported:5.2f} ms, {per_class:.3f} ms a class ({args.classes} classes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
