#!/usr/bin/env bash
# Build a real NVIDIA userspace tree from Debian's archive WITHOUT debootstrap: download only the needed
# .debs (with their dependency closure, resolved by apt against an empty dpkg status) into a cache and
# unpack them with dpkg-deb into a merged-/usr tree. Works for a foreign architecture (arm64) too: nothing
# runs inside the tree while it is built.
#
# Usage: make-nvidia-debs-userspace.sh NAME SUITE ARCH VERSION
#   NAME     artefact name, e.g. debian-nvidia-535-graphics (tree at <artefacts>/NAME, .complete last)
#   SUITE    bookworm | trixie | experimental (experimental is layered over sid)
#   ARCH     amd64 | arm64
#   VERSION  the upstream NVIDIA version that must be unpacked (e.g. 535.309.01)
#
# The graphics set (GLX, EGL, EGL-wayland, Vulkan ICD, PKCS#11 and nvidia-settings' GTK3 library) is
# installed as NVIDIA's packages ship it. nvidia-settings is unpacked WITHOUT its dependencies (libgtk-3
# and friends): the published root must then warn about libnvidia-gtk3's missing libgtk-3.so.0, never
# fail (docs/publish.md).
#
# Environment: ARTEFACTS_DIR (default <repo>/.cache/artefacts), DEBIAN_MIRROR, FORCE=1.
set -euo pipefail

NAME=$1 SUITE=$2 ARCH=$3 EXPECTED=$4
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ARTEFACTS="${ARTEFACTS_DIR:-$REPO/.cache/artefacts}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-${MIRROR%/debian}/debian-security}"
APT_DIR="$REPO/.cache/apt-$SUITE-$ARCH"  # private sources, lists, status and .deb cache
DEST="$ARTEFACTS/$NAME"

log() { printf 'make-nvidia-debs-userspace(%s): %s\n' "$NAME" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

LAYOUT=3  # bump when the package set or the layout changes: older trees are rebuilt
if [[ -z "${FORCE:-}" && -f "$DEST/.complete" && "$(cat "$DEST/.complete")" == "$EXPECTED layout $LAYOUT" ]]; then
  log "ready: $DEST"
  exit 0
fi

case "$ARCH" in
  amd64) TRIPLET=x86_64-linux-gnu ;;
  arm64) TRIPLET=aarch64-linux-gnu ;;
  *) die "unsupported architecture $ARCH" ;;
esac
COMPONENTS="main contrib non-free non-free-firmware"
mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/archives/partial" "$APT_DIR/etc/preferences.d" "$ARTEFACTS"
case "$SUITE" in
  bookworm)
    # 535.309.01 is published through bookworm-security (bookworm itself has 535.261.03).
    cat >"$APT_DIR/etc/sources.list" <<EOF
deb $MIRROR bookworm $COMPONENTS
deb $MIRROR bookworm-updates $COMPONENTS
deb $SECURITY_MIRROR bookworm-security $COMPONENTS
EOF
    ;;
  trixie) printf 'deb %s trixie %s\n' "$MIRROR" "$COMPONENTS" >"$APT_DIR/etc/sources.list" ;;
  experimental)
    printf 'deb %s sid %s\ndeb %s experimental %s\n' "$MIRROR" "$COMPONENTS" "$MIRROR" "$COMPONENTS" \
      >"$APT_DIR/etc/sources.list"
    # experimental is pinned low by its Release file; prefer its NVIDIA packages only.
    printf 'Package: *nvidia* libcuda* libnvcuvid* libnvoptix* libgl*-nvidia* libegl*-nvidia* libgles*-nvidia*\nPin: release a=experimental\nPin-Priority: 990\n' \
      >"$APT_DIR/etc/preferences.d/nvidia"
    ;;
  *) die "unsupported suite $SUITE" ;;
esac
: >"$APT_DIR/status"  # empty dpkg status: apt resolves (and downloads) every dependency
APT=(apt-get -q -o "APT::Architecture=$ARCH" -o "APT::Architectures=$ARCH"
  -o "Dir::Etc::SourceList=$APT_DIR/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$APT_DIR/etc/preferences.d"
  -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::State::status=$APT_DIR/status"
  -o "Dir::Cache=$APT_DIR" -o "Dir::Cache::archives=$APT_DIR/archives"
  -o Debug::NoLocking=1 -o APT::Install-Recommends=false -o APT::Sandbox::User=root)

started=$SECONDS
# Lists are refreshed at most once a day (the suites move; the cache makes re-runs fast).
if [[ -z "$(find "$APT_DIR/lists" -maxdepth 1 -name '*_Packages*' -mtime -1 2>/dev/null)" ]]; then
  log "apt-get update ($SUITE, $ARCH)"
  "${APT[@]}" update >/dev/null
fi

# busybox-static: the static shell the image ships (Dockerfile), published as bin/sh for NVIDIA's DRA
# driver's MPS control daemon (publish/static_tools.py); the suite's own, as the image would have it.
COMPUTE=(nvidia-smi libnvidia-ml1 libcuda1 libnvidia-ptxjitcompiler1 libnvidia-cfg1 firmware-nvidia-gsp
  nvidia-persistenced nvidia-cuda-mps nvidia-opencl-icd libnvcuvid1 libnvidia-encode1 libc-bin nvidia-modprobe
  busybox-static)
GRAPHICS=(libglx-nvidia0 libegl-nvidia0 libgles-nvidia2 libnvidia-egl-wayland1 nvidia-vulkan-icd
  libnvidia-glvkspirv libnvidia-rtcore libnvidia-allocator1 libnvidia-eglcore libnvidia-glcore
  nvidia-vdpau-driver nvidia-egl-common nvidia-egl-icd)
# Package names that differ between versions: take those the archive has.
for p in libnvidia-nvvm4 libnvidia-nvvm5 libnvidia-pkcs11 libnvidia-pkcs11-openssl3 libnvidia-gpucomp \
  libnvidia-egl-gbm1 libnvidia-egl-xcb1 libnvidia-egl-xlib1 libnvidia-api1 libnvidia-sandboxutils1; do
  if "${APT[@]}" -s install "$p" >/dev/null 2>&1; then GRAPHICS+=("$p"); fi
done
log "downloading ${COMPUTE[*]} ${GRAPHICS[*]} with dependencies"
"${APT[@]}" install -y -d "${COMPUTE[@]}" "${GRAPHICS[@]}" >"$APT_DIR/download.log" 2>&1 \
  || { tail -30 "$APT_DIR/download.log" >&2; die "apt-get download failed"; }
# nvidia-settings alone (its libnvidia-gtk3 needs libgtk-3, deliberately absent).
settings=""
if ( cd "$APT_DIR/archives" && "${APT[@]}" download nvidia-settings >/dev/null 2>&1 ); then
  # shellcheck disable=SC2012  # Debian .deb names are [a-z0-9.+~_-] only; ls -t picks the newest download
  settings="$(ls -t "$APT_DIR"/archives/nvidia-settings_*_"$ARCH".deb | head -1)"
fi
mapfile -t debs < <("${APT[@]}" install -y -s "${COMPUTE[@]}" "${GRAPHICS[@]}" 2>/dev/null \
  | awk '/^Inst /{print $2}')
log "downloaded in $((SECONDS - started)) s; unpacking ${#debs[@]} packages"

TMP="$(mktemp -d "$ARTEFACTS/.$NAME.tmp.XXXXXX")"
chmod 0755 "$TMP"
trap 'rm -rf --one-file-system "$TMP"' EXIT
# Merged /usr as in Debian 12+: /lib, /bin, /sbin (and /lib64 on amd64) are links into usr/.
mkdir -p "$TMP/usr/lib" "$TMP/usr/bin" "$TMP/usr/sbin" "$TMP/etc"
ln -s usr/lib "$TMP/lib"; ln -s usr/bin "$TMP/bin"; ln -s usr/sbin "$TMP/sbin"
[[ $ARCH == amd64 ]] && mkdir -p "$TMP/usr/lib64" && ln -s usr/lib64 "$TMP/lib64"
unpack() {  # $1 = .deb
  dpkg-deb --fsys-tarfile "$1" | tar -x -C "$TMP" --keep-directory-symlink --no-same-owner \
    --exclude='./usr/share/doc*' --exclude='./usr/share/man*' --exclude='./usr/share/locale*' --exclude='./etc/init.d*'
}
for pkg in "${debs[@]}"; do
  # shellcheck disable=SC2012  # Debian .deb names are [a-z0-9.+~_-] only (no newline or glob character)
  f="$(ls "$APT_DIR"/archives/"${pkg%%:*}"_*.deb 2>/dev/null | head -1)"
  [[ -n "$f" ]] || die "no .deb for $pkg in $APT_DIR/archives"
  unpack "$f"
done
[[ -n "$settings" ]] && unpack "$settings"

# Debian reaches the NVIDIA binaries and the unversioned library links through update-alternatives
# (nvidia-alternative's postinst; not run here): make the links it would, as ABSOLUTE links.
mkdir -p "$TMP/etc/alternatives"
cur="usr/lib/$TRIPLET/nvidia/current"
for b in "$TMP"/usr/lib/nvidia/current/nvidia-*; do
  [[ -f "$b" && -x "$b" ]] || continue
  n="$(basename "$b")"
  ln -sfn "/usr/lib/nvidia/current/$n" "$TMP/etc/alternatives/$n"
  [[ -e "$TMP/usr/bin/$n" || -L "$TMP/usr/bin/$n" ]] || ln -s "/etc/alternatives/$n" "$TMP/usr/bin/$n"
done
for lib in "$TMP/$cur"/*.so.1 "$TMP/$cur"/*.so.0 "$TMP/$cur"/*.so.2; do
  [[ -e "$lib" ]] || continue
  n="$(basename "$lib")"
  [[ -e "$TMP/usr/lib/$TRIPLET/$n" || -L "$TMP/usr/lib/$TRIPLET/$n" ]] && continue
  ln -sfn "/$cur/$n" "$TMP/etc/alternatives/$n"
  ln -s "/etc/alternatives/$n" "$TMP/usr/lib/$TRIPLET/$n"
done
printf 'include /etc/ld.so.conf.d/*.conf\n' >"$TMP/etc/ld.so.conf"
mkdir -p "$TMP/etc/ld.so.conf.d"
printf '/%s\n' "$cur" >"$TMP/etc/ld.so.conf.d/nvidia.conf"
ldconfig -X -r "$TMP" 2>/dev/null || true  # host ldconfig handles foreign-arch libraries too

ls "$TMP/$cur/libnvidia-ml.so.$EXPECTED" >/dev/null || die "libnvidia-ml.so.$EXPECTED missing under $cur"
[[ -d "$TMP/usr/lib/firmware/nvidia/$EXPECTED" || -d "$TMP/lib/firmware/nvidia/$EXPECTED" ]] \
  || die "GSP firmware nvidia/$EXPECTED missing"
printf '%s\n' "$EXPECTED layout $LAYOUT" >"$TMP/.complete"
rm -rf --one-file-system "$DEST"
mv "$TMP" "$DEST"
trap - EXIT
log "ready: $DEST in $((SECONDS - started)) s ($(du -sh --apparent-size "$DEST" | cut -f1))"
