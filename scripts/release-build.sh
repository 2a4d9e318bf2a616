#!/usr/bin/env bash
# Build, test and (with PUSH=1) publish the image of one NVIDIA driver version: what the release workflow
# (.github/workflows/release.yml) runs, and what runs here too (docs/image.md, "Published images").
#
#   scripts/release-build.sh DRIVER_VERSION [build] [test] [push]      (no phase named: all three)
#
# build  one image per platform, loaded into the local engine: $LOCAL_TAG for the native platform,
#        $LOCAL_TAG-<arch> for each other one (built under qemu/binfmt). The Dockerfile's USERSPACE_SOURCE
#        route (default archive: NVIDIA's driver archive, its URL, sha256 and sha512 per platform from the
#        release data, `scripts/release-matrix.py pins DRIVER ARCH`; tree: an extracted .run installer at
#        NVIDIA_TREE). OCI labels: source, revision, created, version.
# test   the container tests (pytest $TESTS, default tests/container) against the native image, with
#        IMAGE=$LOCAL_TAG and IMAGE_DRIVER_VERSION=DRIVER_VERSION; a smoke run (--help, status naming the
#        userspace version) of every other platform's image. Needs the project venv (scripts/setup.sh).
# push   PUSH=1: the multi-platform image under every tag of the driver (scripts/release-matrix.py tags:
#        also its channel tags, its immutable <driver>-<project version>[-talos<release>] and
#        <channel>-<project version>-talos<release> ones, which it refuses to push twice, and the manager's
#        where the driver carries them),
#        from the build cache, with an SBOM and max provenance attestations, then a cosign signature of
#        the pushed index (keyless in GitHub Actions, or COSIGN_KEY). Needs docker buildx and cosign
#        (SIGN=if-present: sign only where cosign is on PATH, say so otherwise: scripts/image.sh, a
#        user's build). The pushed index's digest, checked to be one, goes to $DIGEST_FILE when set.
#        PUSH unset: says what it would push and stops (no registry is reachable on the project machines).
#
# Environment: IMAGE_REPO (default talos-nvidia-driver), PLATFORMS (default linux/amd64,linux/arm64),
# USERSPACE_SOURCE, NVIDIA_TREE, NVIDIA_ARCHIVE_URL / _SHA256 / _SHA512 (another archive and its pins for every
# platform instead of the release data's, e.g. a test archive served locally), BASE_IMAGE_AMD64 /
# _ARM64 (a base image per platform; default the Dockerfile's), LOCAL_TAG (default
# $IMAGE_REPO:$DRIVER_VERSION), TESTS, BUILD_LOG (default .cache/release-build-<driver>-<arch>.log),
# SOURCE_URL (default from GITHUB_SERVER_URL/GITHUB_REPOSITORY or the git remote).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
# shellcheck source=scripts/docker-build.sh
source scripts/docker-build.sh
# shellcheck source=scripts/binfmt.sh
source scripts/binfmt.sh   # ensure_binfmt: a foreign platform's RUN steps run under qemu-user
log() { printf 'release-build: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

DRIVER="${1:-}"
[[ "$DRIVER" =~ ^[0-9]{3}\.[0-9]{2,3}(\.[0-9]{2,3})?$ ]] || die "usage: $0 DRIVER_VERSION [build] [test] [push]"
shift
PHASES=("$@")
((${#PHASES[@]})) || PHASES=(build test push)
IMAGE_REPO="${IMAGE_REPO:-talos-nvidia-driver}"
PLATFORMS="${PLATFORMS:-linux/amd64,linux/arm64}"
USERSPACE_SOURCE="${USERSPACE_SOURCE:-archive}"
LOCAL_TAG="${LOCAL_TAG:-$IMAGE_REPO:$DRIVER}"
NATIVE="$(uname -m | sed 's/x86_64/amd64/; s/aarch64/arm64/')"
PROJECT_VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)"
mapfile -t TAGS < <(python3 scripts/release-matrix.py tags "$DRIVER" "$IMAGE_REPO")
IFS=', ' read -r -a PLATFORM_LIST <<<"$PLATFORMS"

local_tag() { [[ "$1" == "$NATIVE" ]] && echo "$LOCAL_TAG" || echo "$LOCAL_TAG-$1"; }
upper() { tr '[:lower:]' '[:upper:]' <<<"$1"; }

# OCI labels (https://github.com/opencontainers/image-spec/blob/main/annotations.md) that depend on the
# checkout; title, description, licenses and version come from the Dockerfile. `created` is the commit
# time, so that a rebuild of one commit labels the same.
oci_labels() {
  local source="${SOURCE_URL:-}" revision created
  if [[ -z "$source" && -n "${GITHUB_REPOSITORY:-}" ]]; then source="${GITHUB_SERVER_URL:-https://github.com}/$GITHUB_REPOSITORY"; fi
  if [[ -z "$source" ]]; then source="$(git remote get-url origin 2>/dev/null || echo unknown)"; fi
  revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
  created="$(date -u -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)" +%Y-%m-%dT%H:%M:%SZ)"
  printf '%s\n' "org.opencontainers.image.source=$source" "org.opencontainers.image.revision=$revision" \
    "org.opencontainers.image.created=$created" "org.opencontainers.image.ref.name=$DRIVER"
}

# The archive route's pins: NVIDIA_ARCHIVE_URL/_SHA256/_SHA512 from the environment when set, else each
# platform's from the release data (the URL and both hashes Talos pins, as NVIDIA_ARCHIVE_*_<ARCH>).
archive_args() {
  local arch="$1" a line
  local -a pins
  if [[ -n "${NVIDIA_ARCHIVE_SHA256:-}" ]]; then
    printf '%s\n' --build-arg "NVIDIA_ARCHIVE_SHA256=$NVIDIA_ARCHIVE_SHA256" \
      --build-arg "NVIDIA_ARCHIVE_SHA512=${NVIDIA_ARCHIVE_SHA512:-}"
    [[ -z "${NVIDIA_ARCHIVE_URL:-}" ]] || printf '%s\n' --build-arg "NVIDIA_ARCHIVE_URL=$NVIDIA_ARCHIVE_URL"
    return 0
  fi
  for a in amd64 arm64; do
    [[ "$arch" == all || "$arch" == "$a" ]] || continue
    mapfile -t pins < <(python3 scripts/release-matrix.py pins "$DRIVER" "$a")
    ((${#pins[@]} == 3)) || die "no archive pins for $DRIVER $a in release/talos-drivers.toml"
    for line in "${pins[@]}"; do printf '%s\n' --build-arg "${line%%=*}_$(upper "$a")=${line#*=}"; done
  done
}

build_args() {  # the build arguments of this driver; $1: the platform's arch, or "all" (multi-platform)
  local arch="$1" base label
  printf '%s\n' --build-arg "DRIVER_VERSION=$DRIVER" --build-arg "USERSPACE_SOURCE=$USERSPACE_SOURCE" \
    --build-arg "VERSION=$PROJECT_VERSION"
  [[ -z "${NVIDIA_TREE:-}" ]] || printf '%s\n' --build-arg "NVIDIA_TREE=$NVIDIA_TREE"
  [[ "$USERSPACE_SOURCE" != archive ]] || archive_args "$arch"
  base="BASE_IMAGE_$(upper "$arch")"
  [[ "$arch" == all || -z "${!base:-}" ]] || printf '%s\n' --build-arg "BASE_IMAGE=${!base}"
  while read -r label; do printf '%s\n' --label "$label"; done < <(oci_labels)
}

# The offline routes install the entrypoint from .cache/image-wheels (no index inside the build): a
# foreign platform needs its own builds of the wheels that are not pure Python, same versions.
foreign_wheels() {
  local arch="$1" dir="$REPO/.cache/image-wheels" plat wheel name version
  local -a tags
  [[ "$arch" != "$NATIVE" ]] && compgen -G "$dir/*.whl" >/dev/null || return 0
  # Debian bookworm (the base) has glibc 2.36 and Python 3.11: manylinux_2_36 and older wheels fit.
  plat="$(sed 's/arm64/aarch64/; s/amd64/x86_64/' <<<"$arch")"
  for wheel in "$dir"/*.whl; do
    [[ "$wheel" == *-none-any.whl || "$wheel" == *"$plat"* ]] && continue
    name="$(basename "$wheel" | cut -d- -f1)"; version="$(basename "$wheel" | cut -d- -f2)"
    compgen -G "$dir/$name-$version-*$plat*.whl" >/dev/null && continue
    # pip takes each --platform literally: name every manylinux tag a bookworm system accepts.
    mapfile -t tags < <(for minor in $(seq 17 36); do printf '%s\n' --platform "manylinux_2_${minor}_$plat"; done)
    .venv/bin/python -m pip download -q --only-binary=:all: --no-deps "${tags[@]}" --platform "manylinux2014_$plat" \
      --python-version 3.11 --implementation cp -d "$dir" "$name==$version" 2>&1 | grep -v '^WARNING: Location' >&2 || true
    compgen -G "$dir/$name-$version-*$plat*.whl" >/dev/null || die "no $plat wheel of $name $version"
  done
}

phase_build() {
  local platform arch tag log started
  for platform in "${PLATFORM_LIST[@]}"; do
    arch="${platform#linux/}"; tag="$(local_tag "$arch")"
    log="${BUILD_LOG:-$REPO/.cache/release-build-$DRIVER-$arch.log}"
    mkdir -p "$(dirname "$log")"   # a fresh clone has no .cache yet (make image)
    ensure_binfmt "$arch"; foreign_wheels "$arch"
    # build_args runs in a subshell: a missing pin is caught here, before the build.
    [[ "$USERSPACE_SOURCE" != archive || -n "${NVIDIA_ARCHIVE_SHA256:-}" ]] \
      || python3 scripts/release-matrix.py pins "$DRIVER" "$arch" >/dev/null \
      || die "no archive pins for $DRIVER $arch in release/talos-drivers.toml"
    log "build $tag ($platform, USERSPACE_SOURCE=$USERSPACE_SOURCE); log: $log"
    started=$SECONDS
    mapfile -t args < <(build_args "$arch")
    docker_build --network host --progress plain --platform "$platform" "${args[@]}" -t "$tag" . >"$log" 2>&1 \
      || { tail -40 "$log" >&2; die "build of $tag failed (log: $log)"; }
    log "built $tag in $((SECONDS - started)) s; $(docker image inspect -f '{{.Size}}' "$tag") bytes"
  done
}

phase_test() {
  local platform arch tag out
  for platform in "${PLATFORM_LIST[@]}"; do
    arch="${platform#linux/}"; tag="$(local_tag "$arch")"
    docker image inspect "$tag" >/dev/null 2>&1 || die "no image $tag: run the build phase first"
    if [[ "$arch" == "$NATIVE" ]]; then
      [[ -x .venv/bin/python ]] || die "no .venv: run scripts/setup.sh first"
      log "container tests on $tag: pytest ${TESTS:-tests/container}"
      # shellcheck disable=SC2086  # TESTS is a list of pytest arguments
      IMAGE="$tag" IMAGE_DRIVER_VERSION="$DRIVER" .venv/bin/python -m pytest -q -p no:cacheprovider \
        ${TESTS:-tests/container}
    else
      ensure_binfmt "$arch"
      docker run --rm --platform "$platform" "$tag" --help >/dev/null || die "$tag: --help failed under qemu"
      out="$(docker run --rm --platform "$platform" "$tag" status 2>&1 || true)"
      grep -q "userspace: $DRIVER" <<<"$out" || die "$tag: status does not name userspace $DRIVER: $out"
      log "smoke test of $tag ($platform, under qemu) passed"
    fi
  done
}

phase_push() {
  if [[ "${PUSH:-0}" != 1 ]]; then
    log "push skipped (PUSH=1 not set; no registry is reachable here). It would push $PLATFORMS as: ${TAGS[*]}"
    return 0
  fi
  ((${#TAGS[@]} > 1)) || die "$DRIVER is not a driver that a Talos release ships (release/talos-drivers.toml)"
  docker buildx version >/dev/null 2>&1 || die "PUSH=1 needs docker buildx (multi-platform push)"
  local sign=1
  if ! command -v cosign >/dev/null; then
    [[ "${SIGN:-required}" == if-present ]] || die "PUSH=1 needs cosign"
    sign=0
  fi
  # <driver>-<project version>[-talos<release>] name one build for good (docs/image.md, "Tags"): never re-pushed.
  ! docker buildx imagetools inspect "$IMAGE_REPO:$DRIVER-$PROJECT_VERSION" >/dev/null 2>&1 \
    || die "$IMAGE_REPO:$DRIVER-$PROJECT_VERSION is published already: its tags are immutable (bump the version)"
  local meta tag label digest
  meta="$(mktemp)"
  local -a args=()
  for tag in "${TAGS[@]}"; do args+=(-t "$tag"); done
  # The index carries the OCI annotations too (the per-platform images have them as labels).
  while read -r label; do args+=(--annotation "index:$label"); done < <(oci_labels)
  mapfile -t -O "${#args[@]}" args < <(build_args all)
  docker buildx build --platform "$PLATFORMS" --push --sbom=true --provenance=mode=max \
    --metadata-file "$meta" "${args[@]}" .
  digest="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("containerimage.digest", ""))' "$meta")"
  rm -f "$meta"
  # An empty or malformed digest would sign and print nothing usable: stop instead.
  [[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "the push reported no image digest (got '$digest')"
  [[ -z "${DIGEST_FILE:-}" ]] || printf '%s\n' "$digest" >"$DIGEST_FILE"
  if ((sign == 0)); then
    log "pushed $IMAGE_REPO@$digest: ${TAGS[*]}; NOT signed: no cosign on PATH"
    return 0
  fi
  # Keyless (Sigstore OIDC) in GitHub Actions; COSIGN_KEY for a key pair. One signature covers the index.
  if [[ -n "${COSIGN_KEY:-}" ]]; then cosign sign --yes --key "$COSIGN_KEY" "$IMAGE_REPO@$digest"
  else cosign sign --yes "$IMAGE_REPO@$digest"; fi
  log "pushed and signed $IMAGE_REPO@$digest: ${TAGS[*]}"
}

for phase in "${PHASES[@]}"; do
  case "$phase" in
    build|test|push) "phase_$phase" ;;
    *) die "unknown phase $phase (build, test, push)" ;;
  esac
done
