#!/usr/bin/env bash
# Download one real Debian kernel image package and unpack it, for the kmod parity test and the modinfo
# benchmark. Idempotent: a second run only prints the tree. The module tree's root (the directory that
# holds lib/modules/KVER) is written to $ARTEFACTS_DIR/kernel/TREE.
#
# The -cloud-amd64 flavour is used because it is the smallest (~27 MB .deb, ~1100 signed plain .ko);
# the newest 6.1.0-N ABI in the archive is picked with apt-cache.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dest=${ARTEFACTS_DIR:-$repo/.cache/artefacts}/kernel
flavour=${KERNEL_FLAVOUR:-cloud-amd64}
mkdir -p "$dest"

if [[ -f $dest/TREE && -d $(cat "$dest/TREE") ]]; then
    cat "$dest/TREE"
    exit 0
fi

package=${KERNEL_PACKAGE:-$(apt-cache search --names-only "^linux-image-[0-9.]+-[0-9]+-$flavour\$" \
    | cut -d' ' -f1 | sort -V | tail -n1)}
[[ -n $package ]] || { echo "fetch-kernel-modules: no linux-image-*-$flavour in apt (apt-get update?)" >&2; exit 1; }

cd "$dest"
rm -f ./*.deb
apt-get download "$package" >&2
deb=$(ls ./*.deb | head -n1)
tree=$dest/$package
rm -rf "$tree.tmp"
dpkg -x "$deb" "$tree.tmp"
rm -rf "$tree"
mv "$tree.tmp" "$tree"
rm -f "$deb"
echo "$tree" >"$dest/TREE.tmp"
mv "$dest/TREE.tmp" "$dest/TREE"
cat "$dest/TREE"
