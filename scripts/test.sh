#!/usr/bin/env bash
# The project's test command (README): set up, then the whole pytest suite, ruff, mypy, import-linter and the
# repository linters (scripts/lint-repo.sh: ShellCheck, hadolint, zizmor).
# Fails when any of them fails; stops the Docker engine that setup started, whatever happens.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
trap 'bash scripts/dockerd.sh stop || true' EXIT

bash scripts/setup.sh

failed=()
echo "== pytest" >&2
# Branch coverage of driver_container ([tool.coverage] in pyproject.toml), its summary printed after the
# tests; the floor (fail_under) holds for the whole suite, so a run on a subset (arguments) reports only.
coverage=(--cov --cov-report=term:skip-covered)
if (($#)); then coverage+=(--cov-fail-under=0); fi
rc=0
.venv/bin/python -m pytest "${coverage[@]}" "$@" || rc=$?
case $rc in
  0) ;;
  5) echo "pytest collected no tests: the suite is missing or filtered away" >&2; failed+=("pytest(no tests)") ;;
  *) failed+=("pytest($rc)") ;;
esac

# The release script (what .github/workflows/release.yml runs per driver) up to the push, on the
# image setup built with its build phase: the container tests against it, then the push phase, which
# stops before pushing (no PUSH=1; no registry is reachable here).
if [[ -z "${SKIP_CONTAINER:-}" ]]; then
  echo "== scripts/release-build.sh test push (${IMAGE_TREE:-talos-nvidia-driver:535.309.01-tree})" >&2
  PLATFORMS="linux/$(dpkg --print-architecture)" USERSPACE_SOURCE=tree NVIDIA_TREE=.cache/nvidia-tree \
    LOCAL_TAG="${IMAGE_TREE:-talos-nvidia-driver:535.309.01-tree}" bash scripts/release-build.sh 535.309.01 test push \
    || failed+=(release-build)
fi

echo "== ruff" >&2
.venv/bin/ruff format --check . || failed+=(ruff-format)
.venv/bin/ruff check . || failed+=(ruff)
echo "== mypy" >&2
.venv/bin/mypy || failed+=(mypy)
echo "== lint-imports" >&2
.venv/bin/lint-imports || failed+=(lint-imports)
echo "== scripts/lint-repo.sh (ShellCheck, hadolint, zizmor)" >&2
bash scripts/lint-repo.sh || failed+=(lint-repo)

# The benchmark table (whole processes, ratios against floors measured in the same run) is
# printed on every run; a missed target is reported in it, not a failure (timings on a shared CI machine
# are not tests), but a benchmark that cannot run is.
echo "== bench/run_all.py" >&2
rc=0
.venv/bin/python bench/run_all.py || rc=$?
case $rc in
  0) ;;
  3) echo "bench: some targets missed (see the table above)" >&2 ;;
  *) failed+=("bench($rc)") ;;
esac

# Tests and benchmarks work on copies: a run that wrote into the repository's fixture trees (a sysfs
# parameter, a manifest) would hide the bug from the next run and ship the change in a commit.
echo "== fixtures untouched" >&2
if [[ -n "$(git status --porcelain -- tests/fixtures 2>/dev/null)" ]]; then
  git status --porcelain -- tests/fixtures >&2
  failed+=(fixtures-written)
fi

if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "all checks passed" >&2
