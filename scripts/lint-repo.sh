#!/usr/bin/env bash
# The repository's non-Python linters (docs/development.md, "The loop"), from the PyPI wheels of the test
# extra (pyproject.toml): zizmor over .github/ (workflows and dependabot.yml), hadolint over the Dockerfile,
# ShellCheck over every shell script git knows (a .sh name or a sh/bash shebang; `--list-shell` prints them).
# Zero findings is the bar: an exception is a directive beside the line it excuses, with its reason.
# `make check` and scripts/test.sh (.ci/run) run it; exit 1 when any linter found something.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${VENV:-.venv}/bin

shell_scripts() {  # tracked and untracked-but-not-ignored files: a .sh name or a shell shebang
  local f first
  while IFS= read -r -d '' f; do
    [[ -f $f && ! -L $f ]] || continue
    if [[ $f == *.sh ]]; then printf '%s\n' "$f"; continue; fi
    IFS= read -r first <"$f" || true
    [[ $first =~ ^\#!(/usr)?/bin/(env\ )?(ba|da)?sh([[:space:]]|$) ]] && printf '%s\n' "$f"
  done < <(git ls-files -z --cached --others --exclude-standard)
  return 0
}

if [[ ${1:-} == --list-shell ]]; then shell_scripts; exit 0; fi

failed=()
mapfile -t scripts < <(shell_scripts)
echo "== shellcheck (${#scripts[@]} scripts)" >&2
"$BIN/shellcheck" --severity=style --external-sources -- "${scripts[@]}" || failed+=(shellcheck)
echo "== hadolint" >&2
"$BIN/hadolint" --no-color Dockerfile || failed+=(hadolint)
echo "== zizmor" >&2
# --offline: no GitHub API (the quick lane needs no network); the pins are checked for form, Dependabot moves them.
"$BIN/zizmor" --offline --quiet .github/ || failed+=(zizmor)
if ((${#failed[@]})); then
  echo "lint-repo FAILED: ${failed[*]}" >&2
  exit 1
fi
