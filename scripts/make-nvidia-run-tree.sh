#!/usr/bin/env bash
# Assemble a `.run`-shaped flat tree (the layout `sh NVIDIA-Linux-<arch>-<v>.run -x` extracts: every
# library, binary and config in one directory, GSP firmware in firmware/, the version on line 2 of
# .manifest) from a Debian userspace unpacked by scripts/make-nvidia-debs-userspace.sh. It feeds the
# Dockerfile's USERSPACE_SOURCE=tree route (an extracted .run), so CI builds and tests that route without
# NVIDIA's download server, and scripts/make-nvidia-archive.py packs it in NVIDIA's archive layout for the
# default USERSPACE_SOURCE=archive route (docs/image.md).
#
# Usage: make-nvidia-run-tree.sh SOURCE VERSION DEST
#   SOURCE   a tree made by make-nvidia-debs-userspace.sh (e.g. .cache/artefacts/debian-nvidia-535-graphics)
#   VERSION  the NVIDIA version in it (535.309.01)
#   DEST     the flat tree to (re)create, inside the build context (e.g. .cache/nvidia-tree)
set -euo pipefail

SOURCE=$1 V=$2 DEST=$3
log() { printf 'make-nvidia-run-tree: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[[ -f "$SOURCE/.complete" ]] || die "$SOURCE is not a complete userspace tree"
if [[ -f "$DEST/.manifest" && "$(sed -n 2p "$DEST/.manifest")" == "$V" && "$DEST/.manifest" -nt "$SOURCE/.complete" ]]; then
  log "ready: $DEST"
  exit 0
fi

TMP="$(mktemp -d "$(dirname "$DEST")/.nvidia-tree.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/firmware"
# NVIDIA's own libraries as the .run ships them, real files only (the .run's SONAME links are made by
# the Dockerfile's ldconfig -n). Debian splits them over nvidia/current, the triplet dir and /usr/lib.
NVIDIA_LIB_RE='^lib(nvidia-|cuda\.|cudadebugger|nvcuvid|nvoptix|GLX_nvidia|EGL_nvidia|GLESv1_CM_nvidia|GLESv2_nvidia|vdpau_nvidia)'
for d in usr/lib/x86_64-linux-gnu/nvidia/current usr/lib/aarch64-linux-gnu/nvidia/current \
         usr/lib/x86_64-linux-gnu usr/lib/aarch64-linux-gnu usr/lib; do
  [[ -d "$SOURCE/$d" ]] || continue
  find "$SOURCE/$d" -maxdepth 1 -type f -name 'lib*.so.*' -printf '%f\n' | grep -E "$NVIDIA_LIB_RE" \
    | while read -r n; do [[ -e "$TMP/$n" ]] || cp -p "$SOURCE/$d/$n" "$TMP/$n"; done
done
for b in nvidia-smi nvidia-debugdump nvidia-persistenced nvidia-cuda-mps-control nvidia-cuda-mps-server \
         nvidia-modprobe; do
  for d in usr/lib/nvidia/current usr/bin usr/sbin; do
    if [[ -f "$SOURCE/$d/$b" && ! -L "$SOURCE/$d/$b" ]]; then cp -p "$SOURCE/$d/$b" "$TMP/$b"; break; fi
  done
done
for top in usr/lib/firmware lib/firmware; do
  [[ -d "$SOURCE/$top/nvidia/$V" ]] && cp -p "$SOURCE/$top/nvidia/$V"/gsp*.bin "$TMP/firmware/" && break
done
# Configs under the names the .run uses (its nvidia_icd.json still has the __NV_VK_ICD__ placeholder,
# which the Dockerfile replaces; Debian's is already filled in, so the tree keeps that).
conf() { [[ -f "$SOURCE/$1" ]] && cp -p "$SOURCE/$1" "$TMP/$2" || true; }
conf usr/share/vulkan/icd.d/nvidia_icd.json nvidia_icd.json
conf usr/share/vulkan/implicit_layer.d/nvidia_layers.json nvidia_layers.json
conf usr/share/glvnd/egl_vendor.d/10_nvidia.json 10_nvidia.json
conf usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json 15_nvidia_gbm.json
conf usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json 10_nvidia_wayland.json
conf etc/OpenCL/vendors/nvidia.icd nvidia.icd
ls "$TMP/libcuda.so.$V" "$TMP/libnvidia-ml.so.$V" "$TMP/nvidia-smi" >/dev/null || die "core files missing in $TMP"
printf 'NVIDIA Accelerated Graphics Driver for Linux (assembled from Debian packages)\n%s\n' "$V" >"$TMP/.manifest"
rm -rf "$DEST"
mv "$TMP" "$DEST"
trap - EXIT
log "ready: $DEST ($(find "$DEST" -type f | wc -l) files, $(du -sh --apparent-size "$DEST" | cut -f1))"
