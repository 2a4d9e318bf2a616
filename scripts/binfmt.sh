# shellcheck shell=bash
# Sourced by scripts/release-build.sh and scripts/setup.sh: register qemu-user-static for a foreign
# architecture with binfmt_misc, so that its ELF files run by path (GitHub: docker/setup-qemu-action).
#   release-build.sh: a foreign platform's RUN steps inside the image build;
#   setup.sh: the arm64 userspace tests on an amd64 machine, where `init`'s proof before Ready
#   (driver_container/driverroot/proof.py, docs/init.md) executes the published root's static ldconfig by path,
#   which no PATH shim can redirect.
# Needs root and qemu-user-static (/usr/lib/binfmt.d/qemu-<arch>.conf); `die` must be defined by the caller.

ensure_binfmt() {  # $1: Debian arch (arm64, amd64, ...); no-op for the machine's own
  local arch="$1" qarch=${1/arm64/aarch64} native
  native="$(uname -m | sed 's/x86_64/amd64/; s/aarch64/arm64/')"
  [[ "$arch" == "$native" || -e "/proc/sys/fs/binfmt_misc/qemu-$qarch" ]] && return 0
  [[ -e /proc/sys/fs/binfmt_misc/register ]] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc \
    || die "no binfmt_misc for $arch (run as root, or docker/setup-qemu-action)"
  local conf="/usr/lib/binfmt.d/qemu-$qarch.conf" qemu="/usr/bin/qemu-$qarch-static"
  [[ -f "$conf" && -x "$qemu" ]] || die "qemu-user-static for $arch is not installed"
  # The F flag opens the interpreter now, so that it also works inside containers and chroots.
  sed -e "s#:[^:]*:[A-Z]*\$#:$qemu:F#" "$conf" >/proc/sys/fs/binfmt_misc/register
  printf 'registered qemu-%s with binfmt_misc\n' "$qarch" >&2
}
