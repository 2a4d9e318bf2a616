#!/usr/bin/env bash
# Download real Debian kernel image packages and unpack them, for the kmod parity test and the modinfo
# benchmark. Idempotent: a second run only prints the trees.
#
# - amd64: the -cloud-amd64 flavour, the smallest (~27 MB .deb, ~1100 signed plain .ko); its root
#   (the directory holding lib/modules/KVER) is written to $ARTEFACTS_DIR/kernel/TREE.
# - foreign architectures for the other ELF layouts: s390x (ELF64 big-endian, ~30 MB) and i386
#   (ELF32, -686 flavour, ~52 MB); roots in kernel/TREE-s390x and kernel/TREE-i386. Their package
#   lists go to a private directory (apt -o Dir::State::Lists), the system's apt state is untouched.
#   KERNEL_FOREIGN="" skips them.
# The newest 6.1.0-N ABI of each flavour in the archive is picked with apt-cache.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dest=${ARTEFACTS_DIR:-$repo/.cache/artefacts}/kernel
foreign=${KERNEL_FOREIGN-s390x:s390x i386:686}
mkdir -p "$dest"

# fetch ARCH FLAVOUR TREEFILE [apt options...]
fetch() {
    local arch=$1 flavour=$2 tree_file=$3
    shift 3
    if [[ -f $tree_file && -d $(cat "$tree_file") ]]; then
        cat "$tree_file"
        return
    fi
    local package
    package=${KERNEL_PACKAGE:-}
    [[ $arch == amd64 && -n $package ]] || package=$(apt-cache "$@" search --names-only \
        "^linux-image-[0-9.]+-[0-9]+-$flavour\$" | cut -d' ' -f1 | sort -V | tail -n1)
    [[ -n $package ]] || { echo "fetch-kernel-modules: no linux-image-*-$flavour ($arch) in apt" >&2; exit 1; }
    local work=$dest/download-$arch
    rm -rf "$work"
    mkdir -p "$work"
    (cd "$work" && apt-get -q "$@" download "$package" >&2)
    local tree=$dest/$package
    rm -rf "$tree.tmp"
    dpkg -x "$work"/*.deb "$tree.tmp"
    rm -rf "$tree" "$work"
    mv "$tree.tmp" "$tree"
    echo "$tree" >"$tree_file.tmp"
    mv "$tree_file.tmp" "$tree_file"
    cat "$tree_file"
}

fetch amd64 cloud-amd64 "$dest/TREE"

for item in $foreign; do
    arch=${item%%:*}
    flavour=${item#*:}
    lists=$dest/apt-lists-$arch
    opts=(-o "APT::Architecture=$arch" -o "APT::Architectures=$arch" -o "Dir::State::Lists=$lists")
    if [[ ! -f $dest/TREE-$arch ]]; then
        mkdir -p "$lists/partial"
        # A mirror mid-sync answers one index with the wrong size ("Mirror sync in progress?", seen for
        # bookworm-security i386 on 2026-12-05 for hours): retry, then go on with the lists that did
        # arrive; a package that cannot be found or downloaded still fails below.
        for try in 1 2 3; do
            apt-get -q "${opts[@]}" update >&2 && break
            echo "fetch-kernel-modules: apt-get update ($arch) failed (try $try); going on with the lists it got" >&2
            sleep $((try * 5))
        done
    fi
    fetch "$arch" "$flavour" "$dest/TREE-$arch" "${opts[@]}"
done
