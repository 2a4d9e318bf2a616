#!/usr/bin/env bash
# Create the Dockerfile's default base image locally: no registry is reachable on the project's machines
# (docs/development.md), so `FROM debian:bookworm-slim` cannot be pulled. A debootstrap minbase of the
# same suite, trimmed like the slim image (no docs, man pages, locales, apt lists), imported under that
# tag makes `docker build` use it without pulling. A real pull of the tag replaces it harmlessly.
#
# Environment: BASE_IMAGE (tag, default debian:bookworm-slim), DEBIAN_MIRROR, FORCE=1 to re-create,
# ARCH (a Debian architecture, default the machine's): another one is debootstrapped under qemu-user
# (binfmt_misc, scripts/release-build.sh registers it) and imported for that platform; give it its own tag
# (e.g. BASE_IMAGE=local/debian-arm64:bookworm-slim) and build with BASE_IMAGE_ARM64=<that tag>.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG="${BASE_IMAGE:-debian:bookworm-slim}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ARCH="${ARCH:-$(dpkg --print-architecture)}"
DEB_CACHE="$REPO/.cache/debootstrap-debs"
[[ "$ARCH" == "$(dpkg --print-architecture)" ]] || DEB_CACHE="$DEB_CACHE-$ARCH"
log() { printf 'make-base-image: %s\n' "$*" >&2; }

[[ $EUID -eq 0 ]] || { log "must run as root"; exit 1; }
if [[ -z "${FORCE:-}" ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
  log "$TAG present"; exit 0
fi
mkdir -p "$DEB_CACHE"
TMP="$(mktemp -d)"
trap 'rm -rf --one-file-system "$TMP"' EXIT
chmod 0755 "$TMP"
log "debootstrap --variant=minbase --arch=$ARCH bookworm"
debootstrap --variant=minbase --arch="$ARCH" --cache-dir="$DEB_CACHE" bookworm "$TMP" "$MIRROR" >"$TMP.log" 2>&1 \
  || { tail -20 "$TMP.log" >&2; rm -f "$TMP.log"; exit 1; }
rm -f "$TMP.log"
# What debian:bookworm-slim leaves out (its dpkg path-exclude config); apt lists are fetched again by builds.
rm -rf "$TMP"/usr/share/doc/* "$TMP"/usr/share/man/* "$TMP"/usr/share/info/* "$TMP"/usr/share/locale/* \
  "$TMP"/var/lib/apt/lists/* "$TMP"/var/cache/apt/*.bin "$TMP"/var/cache/apt/archives/*.deb "$TMP"/var/log/*.log
cat >"$TMP/etc/dpkg/dpkg.cfg.d/docker-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
CFG
: >"$TMP/etc/resolv.conf"
if [[ "$ARCH" == "$(dpkg --print-architecture)" ]]; then
  tar -C "$TMP" --numeric-owner -c . | docker import \
    --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - "$TAG" >/dev/null
else
  # `docker import --platform` needs an engine with multi-platform support (not Debian's 20.10): a
  # BuildKit build FROM scratch for that platform records its architecture in the image instead.
  # shellcheck source=scripts/docker-build.sh
  source "$REPO/scripts/docker-build.sh"
  CTX="$(mktemp -d)"; trap 'rm -rf --one-file-system "$TMP" "$CTX"' EXIT
  tar -C "$TMP" --numeric-owner -cf "$CTX/rootfs.tar" .
  printf '%s\n' 'FROM scratch' 'ADD rootfs.tar /' \
    'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' 'CMD ["bash"]' >"$CTX/Dockerfile"
  docker_build --platform "linux/$ARCH" -t "$TAG" "$CTX" >"$CTX/build.log" 2>&1 \
    || { tail -20 "$CTX/build.log" >&2; exit 1; }
fi
log "imported $TAG ($(docker image inspect -f '{{.Size}}' "$TAG") bytes)"
