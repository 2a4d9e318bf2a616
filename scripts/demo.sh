#!/bin/sh
# The README's first command: `nvidia-driver init --no-wait` on a simulated Talos v1.13.9 node
# (tests/fixtures/hosts/talos-1.13-open-595: open modules 595.91.07 loaded by machined) with the small
# synthetic 595.91.07 userspace shipped in tests/fixtures/userspace. Publishes into a temp dir and ends
# with the `nvidia-driver status` command for the host it made.
# Needs no GPU; nothing outside the temp dir is written. As root, init also makes the device nodes in the
# temp dir's driver root; as another user mknod is refused and init warns, as in a pod without CAP_MKNOD.
set -eu
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
if [ ! -x .venv/bin/nvidia-driver ]; then
  echo "== creating .venv (pip install -e .)"
  python3 -m venv .venv
  .venv/bin/pip install -q -e .
fi
HOST=tests/fixtures/hosts/talos-1.13-open-595
USERSPACE=tests/fixtures/userspace/debian-595.91.07
if [ ! -d "$USERSPACE" ]; then
  echo "== building the synthetic userspace ($USERSPACE)"
  sh tests/fixtures/userspace/build.sh 595.91.07 "$REPO/$USERSPACE"
fi
OUT=$(mktemp -d "${TMPDIR:-/tmp}/nvidia-driver-demo.XXXXXX")
# Private copies: init may write the firmware search path under SYSFS_ROOT, and both are completed below.
cp -RP "$HOST" "$OUT/host-fixture"
cp -RP "$USERSPACE" "$OUT/userspace"
H=$OUT/host-fixture
FIRMWARE=$OUT/run/driver/lib/firmware
# The fixture holds only what the status and module tests read; a real node also has these:
# - the kernel argument firmware_class.path=<driver root>/lib/firmware (the Image Factory schematic's
#   extraKernelArgs, docs/talos.md), which the kernel shows in /proc/cmdline and in the firmware loader's
#   parameter, here with this demo's driver root;
# - /proc/devices with the majors the loaded 595 modules register (as in tests/fixtures/node/h100x2-mig).
printf '%s firmware_class.path=%s\n' "$(cat "$H/proc/cmdline")" "$FIRMWARE" >"$H/proc/cmdline.new"
mv "$H/proc/cmdline.new" "$H/proc/cmdline"
mkdir -p "$H/sys/module/firmware_class/parameters"
printf '%s\n' "$FIRMWARE" >"$H/sys/module/firmware_class/parameters/path"
printf '%s\n' 'Character devices:' '  1 mem' ' 10 misc' '195 nvidia' '195 nvidia-modeset' '195 nvidiactl' \
  '226 drm' '235 nvidia-caps-imex-channels' '236 nvidia-caps' '237 nvidia-uvm' '' 'Block devices:' '  8 sd' \
  >"$H/proc/devices"
# The synthetic userspace carries nvidia-settings' GTK3 library without libgtk-3 so that the tests see
# the optional-library warning (its README). It stands for an image built from Debian's packages, whose
# package list (Dockerfile, USERSPACE_SOURCE=debian) has no nvidia-settings: the demo's copy leaves the
# library out and rebuilds the copy's ld.so.cache without it.
rm "$OUT/userspace/usr/lib/libnvidia-gtk3.so.595.91.07"
LDCONFIG=$(command -v ldconfig || echo /sbin/ldconfig)
"$LDCONFIG" -X -r "$OUT/userspace"
# One environment for init and for the status command printed at the end.
set -- DRIVER_VERSION=595.91.07 KERNEL_MODULE_TYPE=open \
  HOST_ROOT_MOUNT="$H/host" PROCFS_ROOT="$H/proc" SYSFS_ROOT="$H/sys" DRIVERS_CONF_DIR="$H/drivers" \
  HOST_OS_RELEASE="$H/host/etc/os-release" USERSPACE_ROOT="$OUT/userspace" RUN_DIR="$OUT/run"
echo "== nvidia-driver init --no-wait (simulated Talos host: $HOST)"
env "$@" DRIVER_CONFIG_DIGEST=demo-digest PATH="$REPO/.venv/bin:$PATH" nvidia-driver init --no-wait
echo
echo "== done. Look at:"
printf '   %-58s %s\n' \
  "$OUT/run/driver" "the published driver root (what gpu-operator mounts)" \
  "$OUT/run/driver/.driver-container/manifest.json" "every published file with its sha256" \
  "$OUT/run/validations/.driver-daemons-status" "$(cat "$OUT/run/validations/.driver-daemons-status")" \
  "$OUT/run/nvidia-driver.state" "$(cat "$OUT/run/nvidia-driver.state")"
echo "   ldconfig -p -C $OUT/run/driver/etc/ld.so.cache"
echo "   chroot $OUT/run/driver /usr/bin/nvidia-smi   (as root: runs the fixture's tiny nvidia-smi)"
echo
echo "== what status reports on this host (add --json for the document, docs/status.md):"
# A word with a character outside the plain set is single-quoted for sh (a ' inside becomes '\''), so the
# line runs as printed, from any directory, whatever TMPDIR holds.
line="env"
for word in "$@" "$REPO/.venv/bin/nvidia-driver" status; do
  case $word in
    *[!A-Za-z0-9_./=:,+-]*) word="'$(printf '%s' "$word" | sed "s/'/'\\\\''/g")'" ;;
  esac
  line="$line $word"
done
echo "$line"
