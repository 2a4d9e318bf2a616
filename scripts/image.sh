#!/usr/bin/env bash
# The image of one Talos release and tier in one command, for a user (docs/quickstart.md, step 1):
#
#   make image TALOS=v1.13.9 TIER=production REGISTRY=ghcr.io/acme [PUSH=0] [DRY_RUN=1]
#   scripts/image.sh [--dry-run] TALOS TIER REGISTRY
#
# Resolves the NVIDIA driver that Talos release ships on that tier (release/talos-drivers.toml, through
# scripts/release-matrix.py driver), then builds it through the one build path, scripts/release-build.sh:
#   PUSH=1 (default)  `release-build.sh DRIVER push`: one docker buildx build of linux/amd64 and
#                     linux/arm64 pushed as $REGISTRY/talos-nvidia-driver under every tag of the driver,
#                     signed with cosign where cosign is on PATH (SIGN=if-present); the pushed index's
#                     digest must be a sha256 digest, or this fails
#   PUSH=0            `release-build.sh DRIVER build`: each platform built into the local engine, nothing
#                     pushed, so no digest exists (said, never printed as an empty value)
#   --dry-run         resolves and prints, runs nothing
# then prints the digest and the NVIDIADriver and helm lines that use this image.
#
# Environment: PUSH, and whatever release-build.sh reads (PLATFORMS, COSIGN_KEY, USERSPACE_SOURCE, ...).
# A foreign platform's RUN steps need qemu-user in binfmt_misc on Linux hosts (docs/image.md).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
log() { printf 'image: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { die "usage: $0 [--dry-run] TALOS TIER REGISTRY (e.g. v1.13.9 production ghcr.io/acme)"; }

DRY_RUN=0
if [[ "${1:-}" == --dry-run ]]; then DRY_RUN=1; shift; fi
(($# == 3)) || usage
TALOS="$1" TIER="$2" REGISTRY="$3"
PUSH="${PUSH:-1}"
# The samples' placeholder (docs/deploy): a reserved name that never resolves, never a registry to push to.
PLACEHOLDER=registry.invalid
OPERATOR_VERSION=v26.7.0   # the gpu-operator release the samples are checked against (docs/operator.md)

[[ -n "$TALOS" ]] || die "TALOS is empty: the Talos release of the nodes, e.g. v1.13.9"
[[ "$TIER" == production || "$TIER" == lts ]] || die "TIER is '$TIER': production or lts (the kmod extension's tier)"
[[ -n "$REGISTRY" ]] || die "REGISTRY is empty: where to push, e.g. ghcr.io/<your account>"
[[ "$REGISTRY" != "$PLACEHOLDER"* ]] || die "REGISTRY is the samples' placeholder $PLACEHOLDER: name your registry"
# A repository path without scheme, tag or trailing slash, lower case (the distribution reference grammar).
[[ "$REGISTRY" =~ ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$ ]] \
  || die "REGISTRY '$REGISTRY' is not a lower-case registry path such as ghcr.io/acme (no https://, no tag)"
[[ "$PUSH" == 0 || "$PUSH" == 1 ]] || die "PUSH is '$PUSH': 1 (push, the default) or 0 (build only)"

DRIVER="$(python3 scripts/release-matrix.py driver "$TALOS" "$TIER")" || exit 1
IMAGE="$REGISTRY/talos-nvidia-driver"
PLATFORMS="${PLATFORMS:-linux/amd64,linux/arm64}"
export IMAGE_REPO="$IMAGE" PLATFORMS

if ((PUSH)); then PHASE=push; else PHASE=build; fi
printf 'Talos %s, %s tier: NVIDIA driver %s\nimage: %s (%s)\n' "$TALOS" "$TIER" "$DRIVER" "$IMAGE" "$PLATFORMS"
printf 'build: IMAGE_REPO=%s PLATFORMS=%s PUSH=%s SIGN=if-present scripts/release-build.sh %s %s\n' \
  "$IMAGE" "$PLATFORMS" "$PUSH" "$DRIVER" "$PHASE"

DIGEST=""
if ((DRY_RUN)); then
  printf 'digest: none: dry run, nothing built or pushed\n'
elif ((PUSH)); then
  digest_file="$(mktemp)"
  trap 'rm -f "$digest_file"' EXIT
  DIGEST_FILE="$digest_file" SIGN=if-present PUSH=1 bash scripts/release-build.sh "$DRIVER" push
  DIGEST="$(cat "$digest_file")"
  [[ "$DIGEST" =~ ^sha256:[0-9a-f]{64}$ ]] || die "the push gave no image digest ('$DIGEST'): nothing to deploy"
  if command -v cosign >/dev/null; then SIGNED=yes; else SIGNED="no (cosign not on PATH)"; fi
  printf 'digest: %s\nsigned: %s\n' "$DIGEST" "$SIGNED"
else
  PUSH=0 bash scripts/release-build.sh "$DRIVER" build
  printf 'digest: none: PUSH=0 pushed nothing (a registry digest exists once pushed)\n'
fi

# The lines to use. With a digest: that one image on every node (one Talos release in the cluster). Without
# one: the tier's channel (the operator appends -talos<release>: <tier>-talos<R> is pushed for every Talos
# release R that ships this driver on this tier) and the manager from the <driver> tag (used as is), since
# the `manager` tag is pushed only with the newest release's production driver (docs/image.md, "Tags").
VERSION="${DIGEST:-$TIER}" MANAGER="${DIGEST:-$DRIVER}"
[[ -n "$DIGEST" ]] || printf '\n# Once pushed (PUSH=1), its tags: the tier channel and the driver tag, no digest.'
printf '\n# gpu-operator %s with one NVIDIADriver (docs/quickstart.md, step 4):\n' "$OPERATOR_VERSION"
printf 'helm install gpu-operator nvidia/gpu-operator --version %s -n gpu-operator --create-namespace \\\n' "$OPERATOR_VERSION"
printf '  -f docs/deploy/gpu-operator-values.yaml \\\n'
printf '  --set driver.nvidiaDriverCRD.enabled=true --set driver.nvidiaDriverCRD.deployDefaultCR=false\n'
printf 'kubectl apply -f docs/deploy/driver-events-rbac.yaml\n'
printf "sed -e 's|%s|%s|' -e 's|^  version: .*|  version: %s|' -e 's|^    version: manager.*|    version: %s|' \\\\\n" \
  "$PLACEHOLDER" "$REGISTRY" "$VERSION" "$MANAGER"
printf '  docs/deploy/nvidiadriver.yaml | kubectl apply -f -\n'
printf '# or the ClusterPolicy driver alone (every node gets the OS tag of one node: one Talos release):\n'
printf 'helm install gpu-operator nvidia/gpu-operator --version %s -n gpu-operator --create-namespace \\\n' "$OPERATOR_VERSION"
printf '  -f docs/deploy/gpu-operator-values.yaml --set driver.repository=%s --set driver.version=%s \\\n' "$REGISTRY" "$VERSION"
printf '  --set driver.manager.repository=%s --set driver.manager.version=%s\n' "$REGISTRY" "$MANAGER"
