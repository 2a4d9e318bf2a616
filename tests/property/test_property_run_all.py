"""bench/run_all.py reads the other benchmark scripts' text exactly as they print it."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.bench import bench_script

run_all = bench_script("run_all")

MODINFO = """tree: 1234 modules (best of 5; wall / CPU)
  kmod modinfo, one process        300.0 /   290.0 ms
  nvidia-driver modinfo, one       900.0 /   800.0 ms   ratio  3.00x /  2.76x (target <= 5x)
big module: 104.9 MB plain
  plain  104.9 MB: file cost kmod    20.0 ms, ours    25.0 ms, ratio  1.25x (target <= 1.5x) | whole processes: x
  xz      40.1 MB: file cost kmod   900.0 ms, ours  1800.0 ms, ratio  2.00x (target <= 1.5x) | whole processes: x
  zstd    41.0 MB: file cost kmod   100.0 ms, ours   120.0 ms, ratio  1.20x (target <= 1.5x) | whole processes: x
"""
PUBLISH = """baseline cp -a + ldconfig -r: 0.478 s
first publish: 0.500 s (47 written) ratio 1.05 (<= 1.3)
unchanged re-publish: 0.076 s (0 written) ratio 0.160 (<= 0.1)
peak RSS during first publish: 25.5 MB (<= 80)
"""


def test_parses_modinfo_table() -> None:
    rows = run_all.parse_modinfo(MODINFO, quick=False)
    assert [(r.value, r.verdict) for r in rows] == [(3.0, "PASS"), (1.25, "PASS"), (2.0, "FAIL"), (1.2, "PASS")]


def test_parses_publish_lines_and_reports_missing_figures() -> None:
    rows = run_all.parse_publish(PUBLISH, 0)
    assert [(r.value, r.target, r.verdict) for r in rows] == [
        (1.05, 1.3, "PASS"),
        (0.16, 0.1, "FAIL"),
        (25.5, 80.0, "PASS"),
    ]
    broken = run_all.parse_publish("Traceback...\nFileNotFoundError: no userspace", 1)
    assert all(r.verdict == "n/a" and "FileNotFoundError" in r.note for r in broken)


def test_table_has_one_line_per_row_with_verdict() -> None:
    text = run_all.table(run_all.parse_publish(PUBLISH, 0))
    lines = text.splitlines()
    assert len(lines) == 2 + 3
    assert lines[3].split()[-1] == "FAIL" and "<= 0.1 x" in lines[3]


def test_peak_rss_is_the_publishing_childs_line() -> None:
    err = "12:00:00 INFO    publishing process (pid 4242): peak RSS 61.5 MB\n"
    assert run_all.publishing_child_peak_mb(err) == 61.5
    assert run_all.publishing_child_peak_mb("no such line") is None


def test_init_logs_its_childs_peak_rss(tmp_path: Path) -> None:
    """The line bench/run_all.py parses is really printed by init (its child's ru_maxrss, not the parent's)."""
    from helpers.hostenv import make_host

    h = make_host(tmp_path / "h")
    done = h.run("init", "--no-wait")
    assert done.returncode == 0, done.stderr
    peak = run_all.publishing_child_peak_mb(done.stderr)
    assert peak is not None and peak > 10, done.stderr  # pyelftools + hashing: well above an idle python


def test_parses_the_startup_rows_that_bench_startup_prints() -> None:
    """The keys come from bench/startup.py's own ``paired`` (fed fixed samples), so a renamed field fails here."""
    startup = bench_script("startup")

    samples = iter([(0.10, 0.09), (0.20, 0.18)] * 3)  # (subject, floor) alternate as paired runs them
    one = startup.paired(lambda: next(samples), lambda: next(samples), rounds=2)
    result = {key: {**one, "target": startup.TARGETS[key]} for key in startup.TARGETS}
    rows = run_all.parse_startup("progress line\n" + json.dumps(result) + "\n", 0)
    assert [r.name for r in rows] == [name for name, _floor in run_all.STARTUP_ROWS.values()]
    assert all(r.value is not None and r.note.startswith("vs ") and "CPU" in r.note for r in rows)
    assert [r.target for r in rows] == [startup.TARGETS[key] for key in run_all.STARTUP_ROWS]
    broken = run_all.parse_startup("no real userspace at ...: run scripts/setup.sh", 2)
    assert all(r.verdict == "n/a" and "setup.sh" in r.note for r in broken)
    # BENCH_VS=REF: two more rows, this tree against REF's, named by REF
    against = run_all.parse_startup(
        json.dumps({**result, "first_init_vs": {**result["first_init_vs"], "ref": "86ec4a0"}}), 0, "86ec4a0"
    )
    assert [r.name for r in against[-2:]] == ["first init --no-wait vs 86ec4a0", "unchanged restart vs 86ec4a0"]
    assert [r.target for r in against[-2:]] == [startup.TARGETS["first_init_vs"], startup.TARGETS["restart_vs"]]
    assert all(r.value is not None and "86ec4a0" in r.note for r in against[-2:])
