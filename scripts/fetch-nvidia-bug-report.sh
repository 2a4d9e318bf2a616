#!/usr/bin/env bash
# NVIDIA's nvidia-bug-report.sh as Debian ships it (nvidia-driver-bin, non-free), unpacked (not installed)
# under the artefacts for tests/integration/test_bug_report_script_real.py: the test runs the script's own
# section writer (its append function) on a fixture command line and redacts what it wrote. Neither
# image route installs nvidia-driver-bin, so no userspace tree has the script. The newest
# nvidia-driver-bin of bookworm and bookworm-security (535.309.01-0+deb12u1 when this was written).
#
# Usage: fetch-nvidia-bug-report.sh     Environment: ARTEFACTS_DIR, DEBIAN_MIRROR, FORCE=1 to fetch again.
# Result: $ARTEFACTS_DIR/nvidia-bug-report/nvidia-bug-report.sh and .complete (the package's version).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARTEFACTS="${ARTEFACTS_DIR:-$REPO/.cache/artefacts}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-${MIRROR%/debian}/debian-security}"
APT_DIR="$REPO/.cache/apt-bookworm-nvidia-driver-bin"
DEST="$ARTEFACTS/nvidia-bug-report"
log() { printf 'fetch-nvidia-bug-report: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ -z "${FORCE:-}" && -f "$DEST/.complete" && -f "$DEST/nvidia-bug-report.sh" ]]; then
  log "ready: $DEST ($(cat "$DEST/.complete"))"
  exit 0
fi
started=$SECONDS
mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/archives/partial" "$APT_DIR/etc" "$ARTEFACTS"
cat >"$APT_DIR/etc/sources.list" <<LIST
deb $MIRROR bookworm non-free
deb $SECURITY_MIRROR bookworm-security non-free
LIST
: >"$APT_DIR/status"
APT=(-q -o APT::Architecture=amd64 -o "Dir::Etc::SourceList=$APT_DIR/etc/sources.list"
  -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::State::status=$APT_DIR/status"
  -o "Dir::Cache=$APT_DIR" -o "Dir::Cache::archives=$APT_DIR/archives" -o Debug::NoLocking=1
  -o APT::Sandbox::User=root)
if [[ -z "$(find "$APT_DIR/lists" -maxdepth 1 -name '*_Packages*' -mtime -1 2>/dev/null)" ]]; then
  log "apt-get update (bookworm, bookworm-security non-free)"
  apt-get "${APT[@]}" update >/dev/null
fi
version="$(apt-cache "${APT[@]}" show nvidia-driver-bin | sed -n 's/^Version: //p' | sort -V | tail -1)"
[[ -n "$version" ]] || die "no nvidia-driver-bin in bookworm non-free"
deb="$APT_DIR/archives/nvidia-driver-bin_${version//:/%3a}_amd64.deb"
if [[ ! -f "$deb" ]]; then
  log "downloading nvidia-driver-bin $version"
  (cd "$APT_DIR/archives" && apt-get "${APT[@]}" download "nvidia-driver-bin=$version" >/dev/null)
fi
[[ -f "$deb" ]] || die "nvidia-driver-bin $version: $deb not downloaded"
TMP="$(mktemp -d "$ARTEFACTS/.nvidia-bug-report.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
dpkg-deb --fsys-tarfile "$deb" | tar -x -O ./usr/lib/nvidia/current/nvidia-bug-report.sh >"$TMP/nvidia-bug-report.sh"
grep -q '^append' "$TMP/nvidia-bug-report.sh" || die "the unpacked nvidia-bug-report.sh has no append function"
chmod 0755 "$TMP" "$TMP/nvidia-bug-report.sh"
echo "nvidia-driver-bin $version" >"$TMP/.complete"
rm -rf "$DEST"
mv "$TMP" "$DEST"
trap - EXIT
log "ready: $DEST (nvidia-driver-bin $version) in $((SECONDS - started)) s"
