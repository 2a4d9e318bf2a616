"""Coverage-guided fuzzing of one parser (atheris), time-bounded; the targets are tests/helpers/fuzz_targets.py.

Usage: .venv/bin/python bench/fuzz.py TARGET [libFuzzer flags...]     e.g. module -max_total_time=60
       .venv/bin/python bench/fuzz.py --list
Only DriverContainerError subclasses may escape a target; anything else is a crash that libFuzzer saves
as crash-<sha1> in the current directory. Defaults: -max_total_time=30 -rss_limit_mb=1024 -max_len=65536,
seeded with the real samples. Without atheris (the optional extra `fuzz`: pip install '.[fuzz]') the
script falls back to a random loop driven by hypothesis over the same targets and the same time bound,
and says so on stderr.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# tests/helpers (helpers.fuzz_targets: the targets the property tests run too), importable as pytest's
# ``pythonpath = ["tests"]`` makes it for the suite; appended, so it shadows no installed module.
sys.path.append(str(REPO / "tests"))
DEFAULTS = {"-max_total_time": "30", "-rss_limit_mb": "1024", "-max_len": "65536"}


def _flags(args: list[str]) -> list[str]:
    given = {a.split("=", 1)[0] for a in args if a.startswith("-")}
    return args + [f"{k}={v}" for k, v in DEFAULTS.items() if k not in given]


def _seconds(flags: list[str]) -> float:
    return float(next(f.split("=", 1)[1] for f in flags if f.startswith("-max_total_time=")))


def _one_input(name: str) -> Callable[[bytes], None]:
    from helpers.fuzz_targets import TARGETS

    from driver_container.base.errors import DriverContainerError

    run = TARGETS[name].run

    def test_one_input(data: bytes) -> None:
        # The contract: expected failures are the project's own errors; anything else is a crash.
        with contextlib.suppress(DriverContainerError):
            run(data)

    return test_one_input


def _atheris(name: str, flags: list[str]) -> int:
    import atheris  # type: ignore[import-untyped,import-not-found,unused-ignore]
    from helpers.fuzz_targets import TARGETS

    test_one_input = _one_input(name)

    with tempfile.TemporaryDirectory(prefix=f"fuzz-{name}-") as corpus:
        for i, seed in enumerate(TARGETS[name].seeds()):
            (Path(corpus) / f"seed-{i}").write_bytes(seed)
        atheris.Setup([sys.argv[0], *flags, corpus], test_one_input)
        atheris.Fuzz()
    return 0


def _fallback(name: str, flags: list[str]) -> int:
    """Random loop: hypothesis draws arbitrary and mutated inputs until the time bound."""
    from helpers.fuzz_mutate import mutated
    from helpers.fuzz_targets import TARGETS
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    print("atheris is not installed: falling back to a hypothesis-driven random loop", file=sys.stderr)
    test_one_input = _one_input(name)
    seeds = TARGETS[name].seeds()
    deadline = time.monotonic() + _seconds(flags)
    count = 0
    inputs = st.one_of(st.binary(max_size=4096), st.sampled_from(seeds).flatmap(mutated)) if seeds else st.binary()

    # Small batches, so the time bound holds to one batch (~0.3 s): a batch of 10 000 ran ~20 s past a 1 s bound.
    @settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(inputs)
    def batch(data: bytes) -> None:
        nonlocal count
        count += 1
        test_one_input(data)

    while time.monotonic() < deadline:
        batch()
    print(f"{name}: {count} inputs, no crash", file=sys.stderr)
    return 0


def _have_atheris() -> bool:
    try:
        import atheris  # noqa: F401  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return False
    return True


def main(argv: list[str]) -> int:
    atheris = _have_atheris()
    if atheris:
        import atheris as lib  # type: ignore[import-untyped,import-not-found,unused-ignore]

        # Instrument before anything imports the package: only first imports are instrumented.
        with lib.instrument_imports(include=["driver_container", "helpers.fuzz_targets"]):
            from helpers.fuzz_targets import TARGETS
    else:
        from helpers.fuzz_targets import TARGETS

    if not argv or argv[0] in ("-h", "--help", "--list"):
        print("targets: " + " ".join(sorted(TARGETS)))
        return 0 if argv else 2
    name, flags = argv[0], _flags(argv[1:])
    if name not in TARGETS:
        print(f"unknown target {name!r}; one of: {' '.join(sorted(TARGETS))}", file=sys.stderr)
        return 2
    return _atheris(name, flags) if atheris else _fallback(name, flags)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
