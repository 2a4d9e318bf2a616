#!/usr/bin/env bash
# Real-GPU check (docs/development.md): run on a machine with an NVIDIA GPU, the NVIDIA modules loaded and the
# matching userspace installed (standard paths, /usr/local/nvidia, or USERSPACE_ROOT=<dir>).
#
#   sudo tests/gpu/check.sh            # from the repository; < 5 minutes; exit 0 = all PASS
#
# It runs `nvidia-driver status` and `init --no-wait` against the real host (HOST_ROOT_MOUNT=/, /proc, /sys),
# publishing into a temporary DRIVER_ROOT/RUN_DIR, then, as gpu-operator's validator does,
# `chroot <root> nvidia-smi -L` and nvidia-smi with LD_PRELOAD=<root's libnvidia-ml.so.1>.
# Nothing on the host changes: module tools on PATH are stubs that refuse (and are reported if called),
# the firmware search path init sets in /sys is restored (checked by reading it back), /proc and /sys are
# bound into the published root only inside a private mount namespace, /dev/nvidia* nodes that NVIDIA's
# userspace creates as root are removed again, and the temporary directory is removed (KEEP=1 keeps it).
# On a non-Talos host (DRIVER_PLATFORM auto -> generic) init would reload the modules unless its state
# says the loaded ones are current: the script gives init a DRIVER_CONFIG_DIGEST and a matching state file
# in its own RUN_DIR, so the modules already loaded are kept (lifecycle.generic_host.prepare_generic) and the module
# tool stubs are never needed. nvidia_modeset is only required when it is loaded.
# Environment: USERSPACE_ROOT, DRIVER_PLATFORM (default auto), PYTHON (default python3), KEEP;
# CHECK_HOST_ROOT, CHECK_PROC, CHECK_SYS (default /, /proc, /sys: only tests point them at a fixture host).
# "test && pass || fail" throughout: pass and fail only append to an array, so fail runs exactly when the test failed.
# shellcheck disable=SC2015
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nvidia-driver-gpu-check.XXXXXX")
HOST=${CHECK_HOST_ROOT:-/}
PROC=${CHECK_PROC:-/proc}
SYS=${CHECK_SYS:-/sys}
DEV=${CHECK_DEV:-/dev}
FW_PARAM=$SYS/module/firmware_class/parameters/path
# sysfs prints the parameter followed by a newline; $(...) drops it.
FW_SAVED=$(cat "$FW_PARAM" 2>/dev/null || true)
# The names of $DEV/nvidia* (devices and directories such as nvidia-caps), one a line.
nvidia_nodes() {
    local path
    for path in "$DEV"/nvidia*; do
        [[ -e $path || -L $path ]] && printf '%s\n' "${path##*/}"
    done
    return 0
}
DEV_BEFORE=$(nvidia_nodes)
RESULTS=()
FAILED=0

log() { printf '\n== %s\n' "$*"; }
pass() { RESULTS+=("PASS  $1"); }
fail() { RESULTS+=("FAIL  $1${2:+: $2}"); FAILED=1; }
# The saved firmware path back into sysfs. A zero-byte write never reaches the kernel (sysfs returns
# before calling the parameter's store), so an empty value is written as one NUL byte: the kernel copies
# the NUL-terminated buffer (param_set_copystring) and the path becomes "" again.
restore_firmware_path() {
    [[ -e $FW_PARAM && -z ${FW_RESTORED:-} ]] || return 0
    FW_RESTORED=1
    if [[ -n $FW_SAVED ]]; then printf '%s' "$FW_SAVED" > "$FW_PARAM"; else printf '\0' > "$FW_PARAM"; fi
    local now
    now=$(tr -d '\0' < "$FW_PARAM" 2>/dev/null)
    if [[ $now == "$FW_SAVED" ]]; then pass "firmware search path restored (${FW_SAVED:-empty})"
    else fail "firmware search path restored" "is '$now', was '$FW_SAVED'"; fi
}
# shellcheck disable=SC2329  # called by cleanup, the EXIT trap
# /dev/nvidia* nodes that were not there before (nvidia-smi and libnvidia-ml create them as root).
remove_new_device_nodes() {
    local name
    for name in $(nvidia_nodes); do
        grep -qxF "$name" <<< "$DEV_BEFORE" && continue
        rm -rf "${DEV:?}/$name" && echo "removed $DEV/$name (created during the check)"
    done
}
# shellcheck disable=SC2329  # the EXIT trap
cleanup() {
    [[ -n ${FW_TOUCHED:-} ]] && restore_firmware_path  # also when interrupted before the summary
    remove_new_device_nodes
    [[ ${KEEP:-0} == 1 ]] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
summary() {
    [[ -n ${FW_TOUCHED:-} ]] && restore_firmware_path
    printf '\n==================== GPU check summary ====================\n'
    printf '%s\n' "${RESULTS[@]}"
    if [[ $FAILED == 0 ]]; then echo "RESULT: PASS"; else echo "RESULT: FAIL"; fi
    exit "$FAILED"
}
# step NAME TIMEOUT CMD...: run with a time bound, output to WORK/NAME.log (shown), record PASS/FAIL.
step() {
    local name=$1 limit=$2; shift 2
    log "$name: $*"
    timeout "$limit" "$@" > "$WORK/$name.log" 2>&1
    local rc=$?
    sed 's/^/    /' "$WORK/$name.log" | tail -n 40
    if [[ $rc == 0 ]]; then pass "$name"; else fail "$name" "exit $rc (log: $WORK/$name.log)"; fi
    return "$rc"
}

# -- prerequisites ---------------------------------------------------------------------------------
log "prerequisites"
[[ $(id -u) == 0 ]] || { fail "root" "run as root (mknod, chroot, sysfs)"; summary; }
if [[ -r $PROC/driver/nvidia/version ]]; then
    head -n1 "$PROC/driver/nvidia/version"; pass "NVIDIA kernel module loaded"
else
    fail "NVIDIA kernel module loaded" "$PROC/driver/nvidia/version missing"; summary
fi
VERSION=$(sed -n 's/.*Kernel Module.*  \([0-9][0-9.]*\)  .*/\1/p' "$PROC/driver/nvidia/version" | head -n1)
echo "loaded driver version: ${VERSION:-unknown}"

has_userspace() { compgen -G "$1/usr/lib/*/libcuda.so.$VERSION" > /dev/null || compgen -G "$1/usr/lib64/libcuda.so.$VERSION" > /dev/null \
    || compgen -G "$1/lib64/libcuda.so.$VERSION" > /dev/null || compgen -G "$1/usr/lib/*/nvidia/current/libcuda.so.$VERSION" > /dev/null; }
if [[ -z ${USERSPACE_ROOT:-} ]]; then
    for candidate in /usr/local/nvidia /run/nvidia/driver /; do
        if has_userspace "$candidate"; then USERSPACE_ROOT=$candidate; break; fi
    done
fi
if [[ -n ${USERSPACE_ROOT:-} ]] && has_userspace "$USERSPACE_ROOT"; then
    pass "userspace $VERSION found under $USERSPACE_ROOT"
else
    fail "userspace" "no libcuda.so.$VERSION under ${USERSPACE_ROOT:-/usr/local/nvidia, /run/nvidia/driver or /}; set USERSPACE_ROOT"
    summary
fi

# -- the entrypoint: the repository's venv, created if missing -------------------------------------
PYTHON=${PYTHON:-python3}
VENV=$REPO/.venv
if [[ ! -x $VENV/bin/nvidia-driver ]]; then
    log "creating $VENV"
    "$PYTHON" -m venv "$VENV" && "$VENV/bin/pip" install -q -e "$REPO" || { fail "venv" "pip install -e $REPO failed"; summary; }
fi
NVD=$VENV/bin/nvidia-driver

# Module tools that refuse: init must not need them with the modules already loaded.
mkdir -p "$WORK/bin"
for tool in modprobe rmmod insmod; do
    printf '#!/bin/sh\necho "%s $*" >> "%s/module-tools.log"\nexit 1\n' "$tool" "$WORK" > "$WORK/bin/$tool"
    chmod 755 "$WORK/bin/$tool"
done

export PATH="$WORK/bin:$PATH" HOST_ROOT_MOUNT=$HOST PROCFS_ROOT=$PROC SYSFS_ROOT=$SYS HOST_OS_RELEASE=${HOST%/}/etc/os-release
export USERSPACE_ROOT DRIVER_PLATFORM=${DRIVER_PLATFORM:-auto} RUN_DIR=$WORK/run DRIVER_ROOT=$WORK/run/driver
export DRIVERS_CONF_DIR=$WORK/drivers NVIDIA_PERSISTENCED_RUNTIME_DIR=$WORK/persistenced
mkdir -p "$DRIVERS_CONF_DIR" "$RUN_DIR"
# Keep the loaded modules on a generic host: the state file says they match this digest (see the top).
export DRIVER_CONFIG_DIGEST=gpu-check
printf '%s' "$DRIVER_CONFIG_DIGEST" > "$RUN_DIR/nvidia-driver.state"
grep -q '^nvidia_modeset ' "$PROC/modules" || export NVIDIA_MODESET=false
if ! grep -q '^nvidia_uvm ' "$PROC/modules"; then
    fail "nvidia_uvm loaded" "load it first (modprobe nvidia-uvm, or nvidia-modprobe -u -c=0); init requires it"; summary
fi

# -- status and init ---------------------------------------------------------------------------------
step status 60 "$NVD" status
FW_TOUCHED=1  # from here on, init may have set the firmware search path: summary restores it
step init 180 "$NVD" init --no-wait
if [[ -s $WORK/module-tools.log ]]; then fail "no module tools called" "$(tr '\n' ';' < "$WORK/module-tools.log")"; else pass "no module tools called"; fi
ROOT=$DRIVER_ROOT
if [[ ! -f $ROOT/.driver-container/manifest.json ]]; then fail "published root" "no manifest in $ROOT"; summary; fi
pass "published root at $ROOT"

# -- as the validator: chroot nvidia-smi, then nvidia-smi with LD_PRELOAD ----------------------------
SMI=""
for d in / /usr/bin /usr/sbin /bin /sbin; do [[ -x $ROOT$d/nvidia-smi && -z $SMI ]] && SMI=$d/nvidia-smi; done
NVML=""
for d in / /usr/lib64 /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /lib64 /lib/x86_64-linux-gnu /lib/aarch64-linux-gnu; do
    [[ -e $ROOT$d/libnvidia-ml.so.1 && -z $NVML ]] && NVML=${d%/}/libnvidia-ml.so.1
done
[[ -n $SMI ]] && pass "nvidia-smi in root ($SMI)" || fail "nvidia-smi in root" "none in /, /usr/bin, /usr/sbin, /bin, /sbin"
[[ -n $NVML ]] && pass "libnvidia-ml.so.1 in root ($NVML)" || fail "libnvidia-ml.so.1 in root" "not in the validator's dirs"
if [[ -n $SMI ]]; then
    # /proc and /sys inside the root only in a private mount namespace (gone when unshare exits).
    # shellcheck disable=SC2016  # $1 and $2 are the inner sh's arguments, expanded there
    step chroot-nvidia-smi 60 unshare -m sh -c \
        'mkdir -p "$1/proc" "$1/sys" && mount --bind /proc "$1/proc" && mount --bind /sys "$1/sys" && chroot "$1" "$2" -L' \
        sh "$ROOT" "$SMI"
    grep -q '^GPU [0-9]' "$WORK/chroot-nvidia-smi.log" && pass "chroot nvidia-smi lists a GPU" || fail "chroot nvidia-smi lists a GPU"
fi
if [[ -n $SMI && -n $NVML ]]; then
    step ld-preload-nvidia-smi 60 env LD_PRELOAD="$ROOT$NVML" "$ROOT$SMI" -L
    grep -q '^GPU [0-9]' "$WORK/ld-preload-nvidia-smi.log" && pass "LD_PRELOAD nvidia-smi lists a GPU" || fail "LD_PRELOAD nvidia-smi lists a GPU"
fi
step status-after 60 "$NVD" status
summary
