#!/usr/bin/env bash
# containerd 2.x from Debian's archive, unpacked (not installed) under .cache/containerd for the CDI tests
# (tests/container/test_cdi_containerd.py). Talos runs containerd 2.x and applies the toolkit's
# CDI specs itself; bookworm's containerd is 1.6 (no CDI in ctr) and trixie's 1.7, so the package comes
# from sid (2.1.9 when this was written). Only the .deb is used, with `dpkg-deb -x`: the system's
# containerd (docker.io's) and its service are untouched; the test starts this one on its own socket, with
# bookworm's runc (a docker.io dependency). Debian packages no nerdctl: the tests use containerd's `ctr`,
# whose `run --device` takes CDI names. Needs only libc6 >= 2.34 (bookworm has 2.36).
#
# Usage: fetch-containerd.sh            Environment: DEBIAN_MIRROR, FORCE=1 to fetch again.
# Result: .cache/containerd/usr/bin/{containerd,containerd-shim-runc-v2,ctr}, .cache/containerd/.complete
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
APT_DIR="$REPO/.cache/apt-sid-containerd"
DEST="$REPO/.cache/containerd"
log() { printf 'fetch-containerd: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ -z "${FORCE:-}" && -f "$DEST/.complete" && -x "$DEST/usr/bin/ctr" ]]; then
  log "ready: $DEST ($(cat "$DEST/.complete"))"
  exit 0
fi
started=$SECONDS
mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/archives/partial" "$APT_DIR/etc"
printf 'deb %s sid main\n' "$MIRROR" >"$APT_DIR/etc/sources.list"
: >"$APT_DIR/status"
APT=(-q -o "Dir::Etc::SourceList=$APT_DIR/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::State::status=$APT_DIR/status" -o "Dir::Cache=$APT_DIR"
  -o "Dir::Cache::archives=$APT_DIR/archives" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
if [[ -z "$(find "$APT_DIR/lists" -maxdepth 1 -name '*_Packages*' -mtime -1 2>/dev/null)" ]]; then
  log "apt-get update (sid main)"
  apt-get "${APT[@]}" update >/dev/null
fi
version="$(apt-cache "${APT[@]}" show containerd | sed -n 's/^Version: //p' | sort -V | tail -1)"
[[ -n "$version" ]] || die "no containerd in sid"
dpkg --compare-versions "$version" ge 2.0 || die "sid's containerd is $version, older than 2.0"
deb="$APT_DIR/archives/containerd_${version//:/%3a}_amd64.deb"
if [[ ! -f "$deb" ]]; then
  log "downloading containerd $version"
  (cd "$APT_DIR/archives" && apt-get "${APT[@]}" download "containerd=$version" >/dev/null)
fi
[[ -f "$deb" ]] || die "containerd $version: $deb not downloaded"
TMP="$(mktemp -d "$REPO/.cache/.containerd.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
dpkg-deb -x "$deb" "$TMP"
rm -rf "${TMP:?}/usr/share" "${TMP:?}/usr/lib" "${TMP:?}/etc"  # only usr/bin is used
"$TMP/usr/bin/ctr" --version >/dev/null || die "the unpacked ctr does not run"
echo "$version" >"$TMP/.complete"
rm -rf "$DEST"
mv "$TMP" "$DEST"
trap - EXIT
log "ready: $DEST (containerd $version) in $((SECONDS - started)) s"
