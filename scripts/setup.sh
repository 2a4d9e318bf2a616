#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine (as root) for the whole test suite; safe to run again, and fast then
# (every step is skipped when its result is already there; caches live under .cache/).
#
#   1. apt packages: kmod (the modinfo oracle), compressors, debootstrap, kbuild prerequisites, docker.io
#   2. .venv with `pip install -e .[test,fuzz]` (Python >= 3.11)
#   3. artefacts: real kernel modules (scripts/fetch-kernel-modules.sh), the Debian NVIDIA 535
#      userspace chroot (scripts/make-nvidia-userspace.sh), the graphics userspaces 535 (amd64, arm64),
#      550 and 555 (scripts/make-nvidia-debs-userspace.sh) and NVIDIA's nvidia-bug-report.sh
#      (scripts/fetch-nvidia-bug-report.sh)
#   4. container tests: a Docker engine (scripts/dockerd.sh start; left running, stop it with
#      `scripts/dockerd.sh stop`), the local base image, host-built wheels and the test images (the
#      Debian, tree and archive routes; the archive one from a driver archive in NVIDIA's layout made of
#      Debian's files, scripts/make-nvidia-archive.py), and containerd 2.x unpacked from Debian sid for the
#      CDI tests (scripts/fetch-containerd.sh)
#
# Environment: SKIP_CONTAINER=1 skips step 4; IMAGE (default talos-nvidia-driver:535.309.01-debian);
# IMAGE_TREE (default talos-nvidia-driver:535.309.01-tree, the USERSPACE_SOURCE=tree image); IMAGE_ARCHIVE
# (default talos-nvidia-driver:535.309.01-archive, the USERSPACE_SOURCE=archive image).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
CACHE="$REPO/.cache"
STAMPS="$CACHE/setup"
IMAGE="${IMAGE:-talos-nvidia-driver:535.309.01-debian}"
IMAGE_TREE="${IMAGE_TREE:-talos-nvidia-driver:535.309.01-tree}"
IMAGE_ARCHIVE="${IMAGE_ARCHIVE:-talos-nvidia-driver:535.309.01-archive}"
# The Dockerfile's BASE_IMAGE is a digest of Docker Hub's image; here the local stand-in of its tag.
LOCAL_BASE=debian:bookworm-slim
mkdir -p "$STAMPS"

step() { printf '\n== setup: %s\n' "$*" >&2; }
die() { printf 'setup: ERROR: %s\n' "$*" >&2; exit 1; }

[[ $EUID -eq 0 ]] || die "run as root (apt, debootstrap, chroot and dockerd need it)"

APT_PACKAGES=(
  kmod xz-utils zstd gzip debootstrap binutils gcc make libc6-dev linux-headers-amd64 openssl
  python3 python3-venv python3-dev docker.io ca-certificates file util-linux qemu-user-static
)
step "apt packages"
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# A fresh machine may have no package lists at all; scripts/fetch-kernel-modules.sh needs them too.
if ((${#missing[@]})) || ! compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
fi
if ((${#missing[@]})); then
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "all ${#APT_PACKAGES[@]} present" >&2
fi

step "python venv (.venv)"
PY="$(command -v python3.11 || command -v python3)"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "$PY is older than 3.11"
venv_key="$(cat pyproject.toml | sha256sum | cut -d' ' -f1)"
if [[ -x .venv/bin/python && "$(cat "$STAMPS/venv" 2>/dev/null)" == "$venv_key" ]] \
  && .venv/bin/python -c 'import driver_container, pytest, testcontainers' 2>/dev/null; then
  echo "up to date" >&2
else
  [[ -x .venv/bin/python ]] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test,fuzz]'
  echo "$venv_key" >"$STAMPS/venv"
fi

step "artefacts: kernel modules"
if [[ -f scripts/fetch-kernel-modules.sh ]]; then
  bash scripts/fetch-kernel-modules.sh
else
  echo "scripts/fetch-kernel-modules.sh not present; skipped" >&2
fi

step "artefacts: Debian NVIDIA 535 userspace"
bash scripts/make-nvidia-userspace.sh >/dev/null

# Every real userspace Debian has, with the graphics packages, unpacked from downloaded .debs
# (about 45-90 s each on a fresh machine, mostly the download; a few seconds when cached).
step "artefacts: Debian NVIDIA userspaces with graphics (535 amd64/arm64, 550, 555)"
bash scripts/make-nvidia-debs-userspace.sh debian-nvidia-535-graphics bookworm amd64 535.309.01
bash scripts/make-nvidia-debs-userspace.sh debian-nvidia-550-graphics trixie amd64 550.163.01
bash scripts/make-nvidia-debs-userspace.sh debian-nvidia-555-graphics experimental amd64 555.58.02
bash scripts/make-nvidia-debs-userspace.sh debian-nvidia-535-arm64 bookworm arm64 535.309.01
# NVIDIA's nvidia-bug-report.sh alone (nvidia-driver-bin, which no image route installs), for the test
# that runs its own section writer and redacts what it wrote (a 220 kB .deb, a few seconds).
step "artefacts: NVIDIA's nvidia-bug-report.sh"
bash scripts/fetch-nvidia-bug-report.sh
# The arm64 userspace's binaries run by path in its tests (init's proof executes the root's static ldconfig):
# qemu-aarch64 registered with binfmt_misc, as on a machine set up by docker/setup-qemu-action.
step "binfmt_misc: qemu-user for arm64"
# shellcheck source=scripts/binfmt.sh
source scripts/binfmt.sh
ensure_binfmt arm64

if [[ -n "${SKIP_CONTAINER:-}" ]]; then
  step "container images skipped (SKIP_CONTAINER set)"
  exit 0
fi

step "docker engine"
bash scripts/dockerd.sh start

# The CDI consumer Talos runs, for tests/container/test_cdi_containerd.py (about 16 s on a fresh
# machine: sid's package list and a 30 MB .deb; instant when cached). NVIDIA's toolkit binaries are not
# set up here: they stay outside the project (NVIDIA_CONTAINER_TOOLKIT_DIR, tests/helpers/toolkit.py).
step "containerd 2.x for the CDI tests"
bash scripts/fetch-containerd.sh

step "base image"
bash scripts/make-base-image.sh

# shellcheck source=scripts/docker-build.sh
source scripts/docker-build.sh   # docker_build: BuildKit through buildx or Debian's 20.10 client

step "wheels for the image (pip cannot reach PyPI inside build containers)"
# A clean directory: wheels left from an older pyproject (e.g. typer 0.29 and its pydantic) would be
# offered to the image build and bloat it.
rm -rf "$CACHE/image-wheels"
# Exactly the hash-locked set the image installs (--require-hashes), and the project's own wheel.
.venv/bin/python -m pip download -q --require-hashes --no-deps --only-binary=:all: -r requirements/image.txt \
  -d "$CACHE/image-wheels"
.venv/bin/python -m pip wheel -q --no-deps . -w "$CACHE/image-wheels"

step "image $IMAGE (USERSPACE_SOURCE=debian, offline route)"
started=$SECONDS
docker_build --network host --progress plain \
  --build-arg USERSPACE_SOURCE=debian --build-arg DRIVER_VERSION=535.309.01 --build-arg "BASE_IMAGE=$LOCAL_BASE" \
  --build-arg "VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)" \
  -t "$IMAGE" . >"$CACHE/image-build.log" 2>&1 \
  || { tail -40 "$CACHE/image-build.log" >&2; die "image build failed (log: $CACHE/image-build.log)"; }
echo "built in $((SECONDS - started)) s; $(docker image inspect -f '{{.Size}}' "$IMAGE") bytes" >&2
# The USERSPACE_SOURCE=tree route (an extracted .run installer in the build context), fed with
# a .run-shaped flat tree assembled from Debian's 535 packages with the graphics libraries; tested by
# tests/container/test_tree_image.py. The BuildKit cache shares every stage but the userspace with $IMAGE.
# Built by the release script's build phase (scripts/release-build.sh, what the release workflow
# runs for every driver), native platform only; scripts/test.sh runs its test and push phases on it.
step "image $IMAGE_TREE (USERSPACE_SOURCE=tree from a .run-shaped tree, scripts/release-build.sh build)"
started=$SECONDS
bash scripts/make-nvidia-run-tree.sh "${ARTEFACTS_DIR:-$CACHE/artefacts}/debian-nvidia-535-graphics" 535.309.01 \
  "$CACHE/nvidia-tree"
PLATFORMS="linux/$(dpkg --print-architecture)" USERSPACE_SOURCE=tree NVIDIA_TREE=.cache/nvidia-tree \
  BASE_IMAGE_AMD64="$LOCAL_BASE" BASE_IMAGE_ARM64="$LOCAL_BASE" \
  LOCAL_TAG="$IMAGE_TREE" BUILD_LOG="$CACHE/image-tree-build.log" bash scripts/release-build.sh 535.309.01 build \
  || die "tree image build failed (log: $CACHE/image-tree-build.log)"
echo "built in $((SECONDS - started)) s" >&2
# The default USERSPACE_SOURCE=archive route, what release builds take: NVIDIA's driver archive downloaded and
# checked against both pins, laid out by its MANIFEST. NVIDIA's server is out of reach, so the archive is one
# in NVIDIA's layout made of the same Debian files (scripts/make-nvidia-archive.py), served over loopback HTTP
# to the same Dockerfile stage (tests/container/test_archive_image.py; its published root in the toolkit and
# validator tests, tests/helpers/published_roots.py).
step "image $IMAGE_ARCHIVE (USERSPACE_SOURCE=archive from a driver archive in NVIDIA's layout)"
started=$SECONDS
ARCHIVE_DIR="${ARTEFACTS_DIR:-$CACHE/artefacts}/nvidia-archive-535"
ARCHIVE="$ARCHIVE_DIR/nvidia_driver-linux-x86_64-535.309.01-archive.tar.xz"
if [[ ! -f "$ARCHIVE.sha512" || "$CACHE/nvidia-tree/.manifest" -nt "$ARCHIVE" || scripts/make-nvidia-archive.py -nt "$ARCHIVE" ]]; then
  python3 scripts/make-nvidia-archive.py "$CACHE/nvidia-tree" 535.309.01 x86_64 "$ARCHIVE_DIR"
fi
port_file="$(mktemp)"
python3 scripts/serve-loopback.py "$ARCHIVE_DIR" >"$port_file" &
server=$!
for _ in $(seq 50); do [[ -s "$port_file" ]] && break; sleep 0.1; done
[[ -s "$port_file" ]] || die "scripts/serve-loopback.py did not start"
PLATFORMS=linux/amd64 USERSPACE_SOURCE=archive BASE_IMAGE_AMD64="$LOCAL_BASE" \
  NVIDIA_ARCHIVE_URL="http://127.0.0.1:$(cat "$port_file")/$(basename "$ARCHIVE")" \
  NVIDIA_ARCHIVE_SHA256="$(cat "$ARCHIVE.sha256")" NVIDIA_ARCHIVE_SHA512="$(cat "$ARCHIVE.sha512")" \
  LOCAL_TAG="$IMAGE_ARCHIVE" BUILD_LOG="$CACHE/image-archive-build.log" bash scripts/release-build.sh 535.309.01 build \
  || { kill "$server"; die "archive image build failed (log: $CACHE/image-archive-build.log)"; }
kill "$server"; rm -f "$port_file"
echo "built in $((SECONDS - started)) s" >&2
# Each rebuild leaves the previous image untagged; drop those so repeated runs do not fill the disk.
docker image prune -f >/dev/null || true
echo "docker engine left running: stop it with scripts/dockerd.sh stop" >&2
