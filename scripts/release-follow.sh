#!/usr/bin/env bash
# Follow Talos: what the daily workflow (.github/workflows/follow-talos.yml) runs, and what runs here too
# (docs/image.md, "Following Talos").
#
#   scripts/release-follow.sh plan     siderolabs/extensions' tags (git ls-remote), nvidia-gpu/vars.yaml of
#                                      every new release, the registry's tags (crane ls); then
#                                      `release-matrix.py plan --write`: release/talos-drivers.toml updated,
#                                      the plan (JSON) in $FOLLOW_DIR/plan.json, the drivers to build one a
#                                      line in $FOLLOW_DIR/build
#   scripts/release-follow.sh build    scripts/release-build.sh DRIVER build test push for each driver to build
#   scripts/release-follow.sh tag      every tag the plan adds, by digest (no rebuild): `docker buildx
#                                      imagetools create -t REPO:NEW REPO@<digest of REPO:SOURCE>`. PUSH
#                                      unset: says what it would tag and stops
#
# Environment: IMAGE_REPO (default talos-nvidia-driver), FOLLOW_DIR (default .cache/follow),
# EXTENSIONS_URL (default https://github.com/siderolabs/extensions), EXTENSIONS_TAGS (a saved
# `git ls-remote --tags` instead of the network), VARS_DIR (saved vars.yaml files, <release>.yaml),
# PUBLISHED (a saved tag list instead of `crane ls`; without PUSH=1 and without it: nothing published),
# RELEASE_DATA (the data file to update, default release/talos-drivers.toml).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
log() { printf 'release-follow: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

IMAGE_REPO="${IMAGE_REPO:-talos-nvidia-driver}"
FOLLOW_DIR="${FOLLOW_DIR:-.cache/follow}"
EXTENSIONS_URL="${EXTENSIONS_URL:-https://github.com/siderolabs/extensions}"

phase_plan() {
  local release commit vars="${VARS_DIR:-$FOLLOW_DIR/vars}"
  mkdir -p "$FOLLOW_DIR" "$vars"
  if [[ -n "${EXTENSIONS_TAGS:-}" ]]; then cp "$EXTENSIONS_TAGS" "$FOLLOW_DIR/tags"
  else git ls-remote --tags "$EXTENSIONS_URL" >"$FOLLOW_DIR/tags"; fi
  while read -r release commit; do
    [[ -f "$vars/$release.yaml" ]] && continue
    # The file at the tag's commit: what the kmod extensions of that release were built from.
    curl -fsSL --max-time 60 "${EXTENSIONS_URL/github.com/raw.githubusercontent.com}/$commit/nvidia-gpu/vars.yaml" \
      -o "$vars/$release.yaml" || die "no nvidia-gpu/vars.yaml at $release ($commit)"
  done < <(python3 scripts/release-matrix.py pending --tags "$FOLLOW_DIR/tags")
  if [[ -n "${PUBLISHED:-}" ]]; then cp "$PUBLISHED" "$FOLLOW_DIR/published"
  elif [[ "${PUSH:-0}" == 1 ]]; then crane ls "$IMAGE_REPO" >"$FOLLOW_DIR/published" || die "crane ls $IMAGE_REPO failed"
  else : >"$FOLLOW_DIR/published"; fi
  python3 scripts/release-matrix.py plan --tags "$FOLLOW_DIR/tags" --vars-dir "$vars" \
    --published "$FOLLOW_DIR/published" --write >"$FOLLOW_DIR/plan.json"
  python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["build"]))' "$FOLLOW_DIR/plan.json" \
    | sed '/^$/d' >"$FOLLOW_DIR/build"
  log "plan: $(tr -d '\n ' <"$FOLLOW_DIR/plan.json")"
}

phase_build() {  # each driver the plan builds, through the release script (its push carries all its tags)
  local driver
  [[ -f "$FOLLOW_DIR/build" ]] || die "no $FOLLOW_DIR/build: run the plan phase first"
  while read -r driver; do
    bash scripts/release-build.sh "$driver" build test push
  done <"$FOLLOW_DIR/build"
}

phase_tag() {
  local source new digest
  [[ -f "$FOLLOW_DIR/plan.json" ]] || die "no $FOLLOW_DIR/plan.json: run the plan phase first"
  while read -r source new; do
    if [[ "${PUSH:-0}" != 1 ]]; then log "would add $IMAGE_REPO:$new to the image of $IMAGE_REPO:$source (PUSH=1 not set)"; continue; fi
    digest="$(crane digest "$IMAGE_REPO:$source")" || die "no $IMAGE_REPO:$source to tag"
    # The same index (all platforms, SBOM, provenance, the cosign signature of this digest): a new name only.
    docker buildx imagetools create -t "$IMAGE_REPO:$new" "$IMAGE_REPO@$digest"
    log "tagged $IMAGE_REPO@$digest as $new"
  done < <(python3 -c 'import json,sys
for source, new in json.load(open(sys.argv[1]))["tag"].items():
    print("\n".join(f"{source} {n}" for n in new))' "$FOLLOW_DIR/plan.json")
}

for phase in "$@"; do
  case "$phase" in
    plan|build|tag) "phase_$phase" ;;
    *) die "unknown phase $phase (plan, build, tag)" ;;
  esac
done
