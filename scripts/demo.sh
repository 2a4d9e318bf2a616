#!/bin/sh
# The README's first command: `nvidia-driver init --no-wait` on a simulated Talos v1.13.9 node
# (tests/fixtures/hosts/talos-1.13-open-595: open modules 595.91.07 loaded by machined) with the small
# synthetic 595.91.07 userspace shipped in tests/fixtures/userspace. Publishes into a temp dir.
# Needs no GPU and no root; nothing outside the temp dir is written.
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
# A private copy of the host: init may write the firmware search path under SYSFS_ROOT.
cp -R "$HOST" "$OUT/host-fixture"
H=$OUT/host-fixture
echo "== nvidia-driver init --no-wait (simulated Talos host: $HOST)"
env DRIVER_VERSION=595.91.07 KERNEL_MODULE_TYPE=open DRIVER_CONFIG_DIGEST=demo-digest \
  HOST_ROOT_MOUNT="$H/host" PROCFS_ROOT="$H/proc" SYSFS_ROOT="$H/sys" DRIVERS_CONF_DIR="$H/drivers" \
  HOST_OS_RELEASE="$H/host/etc/os-release" USERSPACE_ROOT="$REPO/$USERSPACE" RUN_DIR="$OUT/run" \
  PATH="$REPO/.venv/bin:$PATH" \
  nvidia-driver init --no-wait
echo
echo "== done. Look at:"
printf '   %-58s %s\n' \
  "$OUT/run/driver" "the published driver root (what gpu-operator mounts)" \
  "$OUT/run/driver/.driver-container/manifest.json" "every published file with its sha256" \
  "$OUT/run/validations/.driver-daemons-status" "$(cat "$OUT/run/validations/.driver-daemons-status")" \
  "$OUT/run/nvidia-driver.state" "$(cat "$OUT/run/nvidia-driver.state")"
echo "   ldconfig -p -C $OUT/run/driver/etc/ld.so.cache"
echo "   chroot $OUT/run/driver /usr/bin/nvidia-smi   (as root: runs the fixture's tiny nvidia-smi)"
