#!/usr/bin/env bash
# Create the Dockerfile's default base image locally: no registry is reachable on the project's machines
# (docs/development.md), so `FROM debian:bookworm-slim` cannot be pulled. A debootstrap minbase of the
# same suite, trimmed like the slim image (no docs, man pages, locales, apt lists), imported under that
# tag makes `docker build` use it without pulling. A real pull of the tag replaces it harmlessly.
#
# Environment: BASE_IMAGE (tag, default debian:bookworm-slim), DEBIAN_MIRROR, FORCE=1 to re-create.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TAG="${BASE_IMAGE:-debian:bookworm-slim}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DEB_CACHE="$REPO/.cache/debootstrap-debs"
log() { printf 'make-base-image: %s\n' "$*" >&2; }

[[ $EUID -eq 0 ]] || { log "must run as root"; exit 1; }
if [[ -z "${FORCE:-}" ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
  log "$TAG present"; exit 0
fi
mkdir -p "$DEB_CACHE"
TMP="$(mktemp -d)"
trap 'rm -rf --one-file-system "$TMP"' EXIT
chmod 0755 "$TMP"
log "debootstrap --variant=minbase bookworm"
debootstrap --variant=minbase --cache-dir="$DEB_CACHE" bookworm "$TMP" "$MIRROR" >"$TMP.log" 2>&1 \
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
tar -C "$TMP" --numeric-owner -c . | docker import \
  --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  - "$TAG" >/dev/null
log "imported $TAG ($(docker image inspect -f '{{.Size}}' "$TAG") bytes)"
