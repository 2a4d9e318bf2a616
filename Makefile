# The contributor's front door (docs/development.md, "The loop"). Every target runs the tools of the
# project's virtual environment; `make setup` creates it without root.
#
#   make check    the quick lane: format, lint, types, import contracts, the repository linters (ShellCheck,
#                 hadolint, zizmor), unit and property tests
#                 (no root, no Docker engine, no network, no downloaded artefacts)
#   make test     everything, exactly as CI runs it (bash .ci/run: as root, sets the machine up first)
#   make image    TALOS=<release> TIER=<production|lts> REGISTRY=<registry> [PUSH=0] [DRY_RUN=1]: the
#                 image of that Talos release's driver, amd64 and arm64, pushed and signed (scripts/image.sh)

VENV ?= .venv
PY := $(VENV)/bin/python
# The quick lane's tests: the committed fixture trees only; ~1 min on two cores (docs/development.md).
QUICK_TESTS ?= tests/unit tests/property
# Tests that need root, an engine or the artefacts of scripts/setup.sh are deselected by marker; the few
# that check such a prerequisite inside (helpers.support.require) skip, listed by -ra. CI=false keeps them
# skips under a CI service that exports CI=true: `make test` (.ci/run) is the lane where they must run.
QUICK_MARKERS := not root and not artefact and not container
# The quick lane's tests run on every core (pytest-xdist); WORKERS=0 runs them in this process.
WORKERS ?= auto
# The tests call kmod's depmod and libc's ldconfig by name, as the image does; Debian keeps them in sbin,
# which a user's PATH there lacks (root's has it).
QUICK_PATH := $(PATH):/usr/sbin:/sbin
# make image: PUSH=1 pushes (the default), PUSH=0 builds only, DRY_RUN=1 prints only.
PUSH ?= 1
DRY_RUN ?= 0

.DEFAULT_GOAL := help
.PHONY: help setup check format-check lint types imports repo-lint unit format test bench image

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

setup: ## create .venv (no root): the package editable with the test extra
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[test]'

check: format-check lint types imports repo-lint unit ## the quick lane: format, lint, types, import contracts, shell/Dockerfile/workflow linters, unit tests (no root, < 2 min on two cores)

format-check: ## ruff format --check (what `make format` would change fails)
	$(VENV)/bin/ruff format --check .

lint: ## ruff check
	$(VENV)/bin/ruff check .

types: ## mypy --strict over the package and tests/helpers
	$(VENV)/bin/mypy

imports: ## the import-linter contracts of pyproject.toml (layers, formats/ pure, no cycle)
	$(VENV)/bin/lint-imports

repo-lint: ## ShellCheck (every shell script), hadolint (Dockerfile), zizmor (.github/): scripts/lint-repo.sh
	VENV=$(VENV) bash scripts/lint-repo.sh

unit: ## the unit and property tests without root, engines or artefacts
	CI=false PATH='$(QUICK_PATH)' $(PY) -m pytest $(QUICK_TESTS) -q -p no:cacheprovider -n $(WORKERS) -m '$(QUICK_MARKERS)'

format: ## ruff format, then ruff check --fix (rewrites files)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: ## everything, as CI: bash .ci/run (as root; scripts/setup.sh, the whole suite, linters, bench)
	bash .ci/run

bench: ## the benchmark table (bench/run_all.py; BENCH_ARGS=--quick for a shorter run)
	$(PY) bench/run_all.py $(BENCH_ARGS)

image: ## the image of a Talos release and tier: TALOS=v1.13.9 TIER=production REGISTRY=ghcr.io/<you> [PUSH=0] [DRY_RUN=1]
	PUSH='$(PUSH)' bash scripts/image.sh $(if $(filter 1,$(DRY_RUN)),--dry-run) '$(TALOS)' '$(TIER)' '$(REGISTRY)'
