#!/usr/bin/env bash
# Build a Debian bookworm chroot holding Debian's non-free NVIDIA 535 userspace (no kernel modules).
#
# The result is the "real userspace" artefact of the test suite (tests/helpers/support.py ARTEFACTS):
#   <artefacts>/debian-nvidia-535/            the chroot (USERSPACE_ROOT in tests)
#   <artefacts>/debian-nvidia-535/.complete   written last: the tree is usable when this exists
#   <artefacts>/debian-nvidia-535.building    exists (and is flock-ed) while a build runs
#
# Idempotent: a complete tree with the expected version is reused; an interrupted build is discarded.
# The tree is built in a temporary directory next to the destination and renamed at the end, so a reader
# never sees a half-installed chroot.
#
# Environment:
#   ARTEFACTS_DIR      where artefacts live (default <repo>/.cache/artefacts, same as tests/helpers/support.py)
#   DEBIAN_MIRROR      archive URL (default http://deb.debian.org/debian)
#   NVIDIA_EXPECTED    upstream version that must be installed (default 535.309.01)
#   FORCE=1            rebuild even when a complete tree exists
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARTEFACTS="${ARTEFACTS_DIR:-$REPO/.cache/artefacts}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-${MIRROR%/debian}/debian-security}"
EXPECTED="${NVIDIA_EXPECTED:-535.309.01}"
SUITE=bookworm
NAME=debian-nvidia-535
DEST="$ARTEFACTS/$NAME"
MARKER="$ARTEFACTS/$NAME.building"
DEB_CACHE="$REPO/.cache/debootstrap-debs"

# Userspace packages only. What the driver-container publishes (docs/publish.md): libraries, nvidia-smi,
# nvidia-persistenced, MPS, nvidia-modprobe, OpenCL ICD, GSP firmware. Kernel packages are never asked for:
# nvidia-smi/libcuda1 only *Recommend* nvidia-kernel-dkms, so --no-install-recommends keeps dkms, the
# kernel headers and a compiler out (checked below: the build fails if any of them got installed).
PACKAGES=(
  nvidia-smi libnvidia-ml1 libcuda1 libnvidia-ptxjitcompiler1 libnvidia-nvvm4 libnvidia-cfg1
  firmware-nvidia-gsp nvidia-persistenced nvidia-cuda-mps nvidia-modprobe nvidia-opencl-icd
)
FORBIDDEN_RE='^(nvidia-kernel-dkms|nvidia-kernel-support|nvidia-open-kernel-dkms|dkms|linux-image-.*|linux-headers-.*|gcc|gcc-12|make)$'

log() { printf 'make-nvidia-userspace: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

installed_version() {  # $1 = chroot; prints the upstream version of nvidia-smi installed there
  # shellcheck disable=SC2016  # ${Version} is dpkg-query's format field, not a shell expansion
  chroot "$1" dpkg-query -W -f='${Version}' nvidia-smi 2>/dev/null | sed 's/-[^-]*$//'
}

report() {  # $1 = chroot
  local version size
  version="$(installed_version "$1")"
  size="$(du -sh --apparent-size "$1" | cut -f1)"
  log "ready: $1 (NVIDIA userspace $version, $size)"
  echo "$version"
}

[[ $EUID -eq 0 ]] || die "must run as root (debootstrap and chroot need it)"
command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install -y debootstrap"
mkdir -p "$ARTEFACTS" "$DEB_CACHE"

if [[ -z "${FORCE:-}" && -f "$DEST/.complete" && "$(installed_version "$DEST")" == "$EXPECTED" ]]; then
  report "$DEST"
  exit 0
fi

# One builder at a time; a second caller waits for the first and then reuses its result.
exec 9>"$MARKER"
if ! flock -n 9; then
  log "another build holds $MARKER; waiting for it"
  flock 9
  if [[ -z "${FORCE:-}" && -f "$DEST/.complete" && "$(installed_version "$DEST")" == "$EXPECTED" ]]; then
    report "$DEST"
    exit 0
  fi
fi

TMP="$(mktemp -d "$ARTEFACTS/.$NAME.tmp.XXXXXX")"
chmod 0755 "$TMP"  # mktemp makes it 0700: apt's _apt user and non-root readers need to traverse it
cleanup() {
  local rc=$?
  umount "$TMP/proc" 2>/dev/null || true
  [[ -d "$TMP" ]] && rm -rf --one-file-system "$TMP"
  rm -f "$MARKER"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

started=$SECONDS
log "debootstrap --variant=minbase $SUITE into $TMP"
debootstrap --variant=minbase --cache-dir="$DEB_CACHE" "$SUITE" "$TMP" "$MIRROR" >"$TMP.debootstrap.log" 2>&1 \
  || { tail -20 "$TMP.debootstrap.log" >&2; rm -f "$TMP.debootstrap.log"; die "debootstrap failed"; }
rm -f "$TMP.debootstrap.log"

# The non-free components live in their own list so the chroot's main sources.list stays debootstrap's.
# 535.309.01 is published through bookworm-security (bookworm itself has 535.261.03), hence that suite.
cat >"$TMP/etc/apt/sources.list.d/nvidia-non-free.list" <<EOF
deb $MIRROR $SUITE contrib non-free non-free-firmware
deb $MIRROR $SUITE-updates main contrib non-free non-free-firmware
deb $SECURITY_MIRROR $SUITE-security main contrib non-free non-free-firmware
EOF
# No daemon may start inside a build chroot (nvidia-persistenced ships an init script).
printf '#!/bin/sh\nexit 101\n' >"$TMP/usr/sbin/policy-rc.d"
chmod 0755 "$TMP/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$TMP/etc/resolv.conf" 2>/dev/null || true
mount -t proc proc "$TMP/proc"

in_chroot() { chroot "$TMP" env DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }
log "apt-get update"
in_chroot apt-get -q update >/dev/null
candidate="$(in_chroot apt-cache policy nvidia-smi | awk '/Candidate:/ {print $2}')"
[[ "${candidate%-*}" == "$EXPECTED" ]] \
  || die "apt candidate for nvidia-smi is '$candidate', expected $EXPECTED-*; set NVIDIA_EXPECTED or check the mirror"
log "installing ${PACKAGES[*]} ($candidate)"
in_chroot apt-get -q install -y --no-install-recommends "${PACKAGES[@]}" >"$TMP.apt.log" 2>&1 \
  || { tail -30 "$TMP.apt.log" >&2; rm -f "$TMP.apt.log"; die "apt-get install failed"; }
rm -f "$TMP.apt.log"

# shellcheck disable=SC2016  # ${Package} is dpkg-query's format field, not a shell expansion
bad="$(in_chroot dpkg-query -W -f='${Package}\n' | grep -E "$FORBIDDEN_RE" || true)"
[[ -z "$bad" ]] || die "kernel/build packages were pulled in: $bad"

# Lean: the apt lists and the downloaded .debs are not part of a userspace root.
in_chroot apt-get clean
rm -rf "$TMP"/var/lib/apt/lists/* "$TMP"/var/cache/apt/*.bin "$TMP"/var/log/apt "$TMP"/var/log/*.log
rm -f "$TMP/usr/sbin/policy-rc.d" "$TMP/etc/resolv.conf"
umount "$TMP/proc"

version="$(installed_version "$TMP")"
[[ "$version" == "$EXPECTED" ]] || die "installed nvidia-smi is $version, expected $EXPECTED"
[[ -d "$TMP/lib/firmware/nvidia/$EXPECTED" || -d "$TMP/usr/lib/firmware/nvidia/$EXPECTED" ]] \
  || die "GSP firmware directory nvidia/$EXPECTED missing"
ls "$TMP"/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so."$EXPECTED" >/dev/null \
  || die "libnvidia-ml.so.$EXPECTED missing under usr/lib/x86_64-linux-gnu/nvidia/current"

# Without a GPU, a working userspace makes nvidia-smi fail with exit 9 ("couldn't communicate with the
# NVIDIA driver"); a loader problem would give 127. Record it as a sanity check of the tree.
smi_rc=0
chroot "$TMP" /usr/bin/nvidia-smi >/dev/null 2>&1 || smi_rc=$?
log "chroot nvidia-smi exit status: $smi_rc (9 expected without a GPU)"
[[ $smi_rc -ne 127 ]] || die "nvidia-smi cannot be loaded inside the chroot"

printf '%s\n' "$EXPECTED" >"$TMP/.complete"
rm -rf --one-file-system "$DEST"
mv "$TMP" "$DEST"
log "built in $((SECONDS - started)) s"
report "$DEST"
