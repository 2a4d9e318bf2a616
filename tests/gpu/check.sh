#!/usr/bin/env bash
# Real-GPU check (issue 9): run on a machine with an NVIDIA GPU, the NVIDIA modules loaded and the
# matching userspace installed (standard paths, /usr/local/nvidia, or USERSPACE_ROOT=<dir>).
#
#   sudo tests/gpu/check.sh            # from the repository; < 5 minutes; exit 0 = all PASS
#
# It runs `nvidia-driver status` and `init --no-wait` against the real host (HOST_ROOT=/, /proc, /sys),
# publishing into a temporary DRIVER_ROOT/RUN_DIR, then, as gpu-operator's validator does,
# `chroot <root> nvidia-smi -L` and nvidia-smi with LD_PRELOAD=<root's libnvidia-ml.so.1>.
# Nothing on the host changes: module tools on PATH are stubs that refuse (and are reported if called),
# the firmware search path init sets in /sys is restored, /proc and /sys are bound into the published
# root only inside a private mount namespace, and the temporary directory is removed (KEEP=1 keeps it).
# Environment: USERSPACE_ROOT, DRIVER_PLATFORM (default auto), PYTHON (default python3), KEEP.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nvidia-driver-gpu-check.XXXXXX")
FW_PARAM=/sys/module/firmware_class/parameters/path
FW_SAVED=$(cat "$FW_PARAM" 2>/dev/null || true)
RESULTS=()
FAILED=0

log() { printf '\n== %s\n' "$*"; }
pass() { RESULTS+=("PASS  $1"); }
fail() { RESULTS+=("FAIL  $1${2:+: $2}"); FAILED=1; }
cleanup() {
    if [[ -w $FW_PARAM ]]; then printf '%s' "$FW_SAVED" > "$FW_PARAM" 2>/dev/null || true; fi
    [[ ${KEEP:-0} == 1 ]] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
summary() {
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
if [[ -r /proc/driver/nvidia/version ]]; then
    head -n1 /proc/driver/nvidia/version; pass "NVIDIA kernel module loaded"
else
    fail "NVIDIA kernel module loaded" "/proc/driver/nvidia/version missing"; summary
fi
VERSION=$(sed -n 's/.*Kernel Module.*  \([0-9][0-9.]*\)  .*/\1/p' /proc/driver/nvidia/version | head -n1)
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

export PATH="$WORK/bin:$PATH" HOST_ROOT=/ PROCFS_ROOT=/proc SYSFS_ROOT=/sys HOST_OS_RELEASE=/etc/os-release
export USERSPACE_ROOT DRIVER_PLATFORM=${DRIVER_PLATFORM:-auto} RUN_DIR=$WORK/run DRIVER_ROOT=$WORK/run/driver
export DRIVERS_CONF_DIR=$WORK/drivers NVIDIA_PERSISTENCED_RUNTIME_DIR=$WORK/persistenced
mkdir -p "$DRIVERS_CONF_DIR"

# -- status and init ---------------------------------------------------------------------------------
step status 60 "$NVD" status
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
