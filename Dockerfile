# NVIDIA driver container for Talos Linux: the NVIDIA userspace (no kernel modules: Talos loads them from
# its kmod extension) plus the `nvidia-driver` entrypoint that verifies and publishes it (docs/image.md).
#
# Needs BuildKit (`docker buildx build`, or `DOCKER_BUILDKIT=1 docker build` with a 20.10-22.x client):
# only the userspace stage selected by USERSPACE_SOURCE is built, and TARGETARCH is set by the builder.
#
#   USERSPACE_SOURCE=archive (default) NVIDIA's driver archive, the payload Talos ships
#                            (nvidia_driver-linux-<arch>-<v>-archive.tar.xz), downloaded and checked against
#                            NVIDIA_ARCHIVE_SHA256 and NVIDIA_ARCHIVE_SHA512 (both required; per platform
#                            NVIDIA_ARCHIVE_*_AMD64/_ARM64; URL: NVIDIA_ARCHIVE_URL, default NVIDIA's redist
#                            server); the file set is the archive's MANIFEST.
#   USERSPACE_SOURCE=tree    NVIDIA's .run installer already extracted (`sh NVIDIA-Linux-*.run -x`) at
#                            NVIDIA_TREE inside the build context (air-gapped builds).
#   USERSPACE_SOURCE=debian  Debian bookworm's non-free packages (apt over plain http; BASE_IMAGE must be
#                            Debian bookworm). Gives 535.x, the version Debian ships.
# Python: the packages of requirements/image.txt (hash-locked, pip --require-hashes), from the wheels in
# .cache/image-wheels/ of the context when present (--no-index; prepare them with `pip download
# --require-hashes -r requirements/image.txt -d .cache/image-wheels`), else from the index.
# BASE_IMAGE: Debian bookworm-slim by digest; offline machines build with a local image named by its tag
# (scripts/make-base-image.sh, BASE_IMAGE=debian:bookworm-slim).

# Debian bookworm-slim's multi-platform index as docker-library records it (docker-library/repo-info
# repos/debian/remote/bookworm-slim.md @ 05f354f0a08a, build of 2026-08-03); Dependabot keeps it current.
ARG BASE_IMAGE=debian:bookworm-slim@sha256:abd67ffcfa541b485a3dff59865ab629aa048a6c613e639d36e7456b0b229241
ARG USERSPACE_SOURCE=archive
ARG FABRIC_SOURCE=none

# ---------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS python-base
# The entrypoint needs only the interpreter (no pip, no venv module) in the final image.
# hadolint DL3008 (apt versions unpinned): the Debian suite of the base image is the pin; an exact version leaves
# the archive at its next security update and would break every rebuild.
# hadolint ignore=DL3008
RUN set -eu; \
    if ! command -v python3 >/dev/null; then \
      apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3 \
      && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log; \
    fi; \
    python3 -c 'import sys; assert sys.version_info >= (3, 11), sys.version'

# ---------------------------------------------------------------------------------------------------
FROM python-base AS venv
# hadolint DL3008 (apt versions unpinned): the Debian suite of the base image is the pin; an exact version leaves
# the archive at its next security update and would break every rebuild.
# hadolint ignore=DL3008
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-venv
COPY pyproject.toml README.md LICENSE NOTICE /src/
COPY requirements/image.txt /src/requirements/image.txt
COPY driver_container /src/driver_container
# The wildcard lets the directory be absent (BuildKit accepts an empty match): then pip uses the index.
COPY .cache/image-wheel[s] /wheels/
# The dependencies only as requirements/image.txt pins them (versions and wheel hashes, --require-hashes);
# then the project itself, without dependencies (its wheel from /wheels, or built from /src).
RUN set -eu; \
    python3 -m venv /opt/nvidia-driver; pip=/opt/nvidia-driver/bin/pip; \
    if ls /wheels/*.whl >/dev/null 2>&1; then \
      "$pip" install -q --no-index --find-links /wheels --require-hashes --no-deps -r /src/requirements/image.txt; \
      "$pip" install -q --no-index --find-links /wheels --no-deps talos-nvidia-driver-container; \
    else \
      "$pip" install -q --require-hashes --no-deps -r /src/requirements/image.txt; \
      "$pip" install -q --no-deps /src; \
    fi; \
    "$pip" check; \
    # Rich (with pygments and markdown-it: 14 MB, ~60 ms per start) only colours typer's help and
    # tracebacks; the final stage sets TYPER_USE_RICH=0, which makes typer format them with click's plain
    # formatter and never import rich.
    /opt/nvidia-driver/bin/pip uninstall -q -y rich pygments markdown-it-py mdurl pip setuptools; \
    # zstandard ships its C backend and a 12 MB CFFI twin; the C one is always importable here.
    rm -f /opt/nvidia-driver/lib/python3*/site-packages/zstandard/_cffi.*.so \
          /opt/nvidia-driver/lib/python3*/site-packages/zstandard/backend_cffi.py; \
    # The image runs with PYTHONDONTWRITEBYTECODE=1 (read-only rootfs): without byte-code baked in, every
    # start compiles the package again (~150 ms). unchecked-hash: valid whatever the COPY does to mtimes.
    /opt/nvidia-driver/bin/python -m compileall -q -f --invalidation-mode unchecked-hash \
      /opt/nvidia-driver/lib >/dev/null; \
    TYPER_USE_RICH=0 /opt/nvidia-driver/bin/nvidia-driver --help >/dev/null

# ---------------------------------------------------------------------------------------------------
# USERSPACE_SOURCE=archive: NVIDIA's driver archive, the payload Talos ships. siderolabs/extensions pins it per
# Talos release and tier (nvidia-gpu/vars.yaml NVIDIA_PKGS_<TIER>_<ARCH>_SHA256/_SHA512) and downloads it from
# NVIDIA's redist server (nvidia-gpu/nvidia-container-toolkit/nvidia-pkgs/*/pkg.yaml @ 26822f5c95ab); the
# release data carries the same URL and both hashes (release/talos-drivers.toml, scripts/release-build.sh).
# A build without both hashes, or whose download has other ones, fails and prints expected and actual values.
FROM python-base AS nvidia-fetch-archive
# Before the pins are declared: a build with other pins (or a wrong one) reuses this layer.
# hadolint DL3008 (apt versions unpinned): the Debian suite of the base image is the pin; an exact version leaves
# the archive at its next security update and would break every rebuild.
# hadolint ignore=DL3008
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      ca-certificates curl xz-utils && rm -rf /var/lib/apt/lists/*
ARG DRIVER_VERSION
ARG TARGETARCH
ARG NVIDIA_ARCHIVE_URL=""
ARG NVIDIA_ARCHIVE_SHA256=""
ARG NVIDIA_ARCHIVE_SHA512=""
# Per-platform pins for one multi-platform build (scripts/release-build.sh); each overrides the plain one.
ARG NVIDIA_ARCHIVE_URL_AMD64=""
ARG NVIDIA_ARCHIVE_SHA256_AMD64=""
ARG NVIDIA_ARCHIVE_SHA512_AMD64=""
ARG NVIDIA_ARCHIVE_URL_ARM64=""
ARG NVIDIA_ARCHIVE_SHA256_ARM64=""
ARG NVIDIA_ARCHIVE_SHA512_ARM64=""
ARG NVIDIA_REDIST_BASE=https://developer.download.nvidia.com/compute
# hadolint DL4006 (pipefail): each pipe ends in cut over a hash sum of a file that exists; an empty sum fails
# the comparison with the pin.
# hadolint ignore=DL4006
RUN set -eu; \
    test -n "${DRIVER_VERSION}" || { echo "DRIVER_VERSION build arg is required" >&2; exit 1; }; \
    case "${TARGETARCH:-amd64}" in \
      amd64) a=x86_64 url="${NVIDIA_ARCHIVE_URL_AMD64}" s256="${NVIDIA_ARCHIVE_SHA256_AMD64}" s512="${NVIDIA_ARCHIVE_SHA512_AMD64}" ;; \
      arm64) a=sbsa url="${NVIDIA_ARCHIVE_URL_ARM64}" s256="${NVIDIA_ARCHIVE_SHA256_ARM64}" s512="${NVIDIA_ARCHIVE_SHA512_ARM64}" ;; \
      *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; esac; \
    url="${url:-${NVIDIA_ARCHIVE_URL:-${NVIDIA_REDIST_BASE}/nvidia-driver/redist/nvidia_driver/linux-$a/nvidia_driver-linux-$a-${DRIVER_VERSION}-archive.tar.xz}}"; \
    s256="${s256:-${NVIDIA_ARCHIVE_SHA256}}"; s512="${s512:-${NVIDIA_ARCHIVE_SHA512}}"; \
    if [ -z "$s256" ] || [ -z "$s512" ]; then \
      echo "NVIDIA_ARCHIVE_SHA256 and NVIDIA_ARCHIVE_SHA512 are both required (release/talos-drivers.toml)" >&2; exit 1; fi; \
    # Bounded: 30 s to connect, 30 min and 4 GiB at most; --fail: an HTTP error fails, no error page is kept.
    curl --fail --silent --show-error --location --retry 3 --connect-timeout 30 --max-time 1800 \
      --max-filesize 4294967296 -o /tmp/nvidia.tar.xz "$url"; \
    got256="$(sha256sum /tmp/nvidia.tar.xz | cut -d' ' -f1)"; got512="$(sha512sum /tmp/nvidia.tar.xz | cut -d' ' -f1)"; \
    if [ "$got256" != "$s256" ] || [ "$got512" != "$s512" ]; then \
      printf '%s\n' "$url does not match its pins:" "  sha256 expected $s256" "  sha256 actual   $got256" \
        "  sha512 expected $s512" "  sha512 actual   $got512" >&2; exit 1; fi; \
    mkdir -p /nv; tar -xJf /tmp/nvidia.tar.xz --strip-components=1 --no-same-owner -C /nv; rm -f /tmp/nvidia.tar.xz; \
    printf 'url=%s\nsha256=%s\nsha512=%s\n' "$url" "$s256" "$s512" >/tmp/driver-archive

# The file set is the archive's MANIFEST (what nvidia-installer installs), not a pattern over its files:
# scripts/nvidia-archive-layout.py. SONAME links as the dynamic linker looks them up (ldconfig -n).
FROM nvidia-fetch-archive AS nvidia-archive-layout
ARG DRIVER_VERSION
ARG TARGETARCH
COPY scripts/nvidia-archive-layout.py /usr/local/lib/nvidia-archive-layout.py
RUN set -eu; \
    case "${TARGETARCH:-amd64}" in amd64) triplet=x86_64-linux-gnu ;; arm64) triplet=aarch64-linux-gnu ;; esac; \
    python3 /usr/local/lib/nvidia-archive-layout.py /nv /staging "$triplet" "${DRIVER_VERSION}"; \
    cp /tmp/driver-archive /staging/usr/share/nvidia/driver-archive; \
    ldconfig -n "/staging/usr/lib/$triplet"; \
    if [ -d "/staging/usr/lib/$triplet/vdpau" ]; then ldconfig -n "/staging/usr/lib/$triplet/vdpau"; fi

FROM python-base AS userspace-archive
COPY --from=nvidia-archive-layout /staging/ /

# ---------------------------------------------------------------------------------------------------
# USERSPACE_SOURCE=tree: an extracted .run installer (`sh NVIDIA-Linux-<arch>-<v>.run -x`) in the build context,
# laid out in the standard paths under /staging. 64-bit userspace only (the 32/ compat libraries are not used
# by containers); kernel module sources (kernel/, kernel-open/), the installer itself, X driver and man pages
# are left behind. Firmware goes to /usr/share/nvidia/firmware, because at runtime gpu-operator mounts the
# host's <driver root>/lib/firmware over the container's /lib/firmware (= /usr/lib/firmware on merged-/usr
# bases), hiding anything baked in there.
FROM python-base AS nvidia-extracted-installer
ARG DRIVER_VERSION
RUN set -eu; mkdir -p /nv /staging

FROM nvidia-extracted-installer AS nvidia-fetch-tree
ARG NVIDIA_TREE=nvidia-tree
COPY ${NVIDIA_TREE}/ /nv/

FROM nvidia-fetch-tree AS nvidia-layout
ARG DRIVER_VERSION
ARG TARGETARCH
# hadolint DL3003 (cd): cd inside this RUN only; a WORKDIR would stay for every later instruction.
# hadolint ignore=DL3003
RUN set -eu; \
    v="${DRIVER_VERSION}"; test -n "$v" || v="$(sed -n 2p /nv/.manifest)"; \
    case "${TARGETARCH:-amd64}" in amd64) triplet=x86_64-linux-gnu ;; arm64) triplet=aarch64-linux-gnu ;; esac; \
    cd /nv; s=/staging; lib="$s/usr/lib/$triplet"; \
    mkdir -p "$lib" "$s/usr/bin" "$s/usr/share/nvidia/firmware/nvidia/$v"; \
    for f in ./*.so.*; do [ -f "$f" ] && [ ! -L "$f" ] && cp -p "$f" "$lib/"; done; \
    for b in nvidia-smi nvidia-debugdump nvidia-persistenced nvidia-cuda-mps-control nvidia-cuda-mps-server \
             nvidia-modprobe nvidia-imex nvidia-imex-ctl; do \
      if [ -f "$b" ]; then install -m 0755 "$b" "$s/usr/bin/$b"; fi; done; \
    # `if`, not `[ ] &&`: under `set -e` a loop or function whose last test fails fails the build (535's
    # .run has no nvidia-imex, a tree may lack nvoptix.bin).
    if [ -d firmware ]; then cp -p firmware/*.bin "$s/usr/share/nvidia/firmware/nvidia/$v/"; fi; \
    conf() { if [ -f "$1" ]; then install -D -m 0644 "$1" "$s$2"; fi; }; \
    conf nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; \
    conf nvidia_layers.json /etc/vulkan/implicit_layer.d/nvidia_layers.json; \
    conf 10_nvidia.json /usr/share/glvnd/egl_vendor.d/10_nvidia.json; \
    conf 15_nvidia_gbm.json /usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json; \
    conf 10_nvidia_wayland.json /usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json; \
    conf nvidia.icd /etc/OpenCL/vendors/nvidia.icd; \
    conf nvoptix.bin /usr/share/nvidia/nvoptix.bin; \
    conf "nvidia-application-profiles-$v-rc" "/usr/share/nvidia/nvidia-application-profiles-$v-rc"; \
    [ ! -f "$s/etc/vulkan/icd.d/nvidia_icd.json" ] || \
      sed -i 's/__NV_VK_ICD__/libGLX_nvidia.so.0/' "$s/etc/vulkan/icd.d/nvidia_icd.json"; \
    # SONAME links (libcuda.so.1 -> libcuda.so.<v>, ...) exactly as the dynamic linker will look them up.
    ldconfig -n "$lib"; \
    echo "$v" >"$s/usr/share/nvidia/driver-version"

FROM python-base AS userspace-tree
COPY --from=nvidia-layout /staging/ /

# Debian's packages are installed in a throw-away stage and only NVIDIA's files are copied on: installing
# them in the final stage would also bring their dependencies (ocl-icd, libssl, ...) and apt's lists,
# ~80 MB that the driver root never publishes.
FROM python-base AS nvidia-debian-install
ARG DRIVER_VERSION=""
# A separate sources list keeps the base's own list untouched; 535.x updates come through the security
# suite (bookworm itself lags behind). Recommends are off so nvidia-kernel-dkms, headers and gcc stay out.
# hadolint DL3008 (apt versions unpinned): the Debian suite of the base image is the pin; an exact version leaves
# the archive at its next security update and would break every rebuild.
# hadolint DL3009 (apt lists kept): a build stage; only /staging leaves it (COPY --from).
# hadolint DL4006 (pipefail): dpkg-query reads nvidia-smi, installed by the line before; a wrong version fails below.
# hadolint ignore=DL3008,DL3009,DL4006
RUN set -eu; \
    printf '%s\n' \
      "deb http://deb.debian.org/debian bookworm main contrib non-free non-free-firmware" \
      "deb http://deb.debian.org/debian bookworm-updates main contrib non-free non-free-firmware" \
      "deb http://deb.debian.org/debian-security bookworm-security main contrib non-free non-free-firmware" \
      >/etc/apt/sources.list.d/nvidia-non-free.list; \
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 0755 /usr/sbin/policy-rc.d; \
    apt-get update -q; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      nvidia-smi libnvidia-ml1 libcuda1 libnvidia-ptxjitcompiler1 libnvidia-nvvm4 libnvidia-cfg1 \
      firmware-nvidia-gsp nvidia-persistenced nvidia-cuda-mps nvidia-modprobe nvidia-opencl-icd; \
    v="$(dpkg-query -W -f='${Version}' nvidia-smi | sed 's/-[^-]*$//')"; \
    if [ -n "${DRIVER_VERSION}" ] && [ "$v" != "${DRIVER_VERSION}" ]; then \
      echo "Debian ships NVIDIA $v, DRIVER_VERSION is ${DRIVER_VERSION}" >&2; exit 1; fi; \
    echo "$v" >/tmp/driver-version

# Stage NVIDIA's files (every file of the NVIDIA packages but docs, plus the update-alternatives links
# that make libcuda.so.1 etc. resolve) under /staging with relative links only, so that the tree is
# also valid when copied under another root.
FROM nvidia-debian-install AS nvidia-debian-layout
# hadolint DL4006 (pipefail): the pipes filter dpkg's own lists of packages installed in the stage before; the
# staged tree is then checked (firmware present, no dangling link).
# hadolint ignore=DL4006
RUN set -eu; \
    s=/staging; v="$(cat /tmp/driver-version)"; mkdir -p "$s"; \
    dpkg-query -W -f='${Package}\n' | grep -E 'nvidia|cuda' >/tmp/pkgs; \
    xargs dpkg -L </tmp/pkgs | sort -u \
      | grep -Ev '^/usr/share/(doc|man|lintian|bug|bash-completion)(/|$)' \
      | sed -E 's#^/(lib|lib64|bin|sbin)/#/usr/\1/#' >/tmp/files; \
    # bookworm is merged-/usr: packages list /lib/... paths, which are /usr/lib/... (/lib is a link).
    # update-alternatives links are not in dpkg's lists: /etc/alternatives/* and what points at them.
    find /etc/alternatives -maxdepth 1 -type l \( -name 'nvidia*' -o -name 'glx*' \) >>/tmp/files; \
    find /usr /etc -xdev -type l -lname '/etc/alternatives/*' \( -lname '*nvidia*' -o -lname '*glx*' \) >>/tmp/files; \
    while read -r f; do \
      if [ -L "$f" ] || [ -f "$f" ]; then cp -a --parents "$f" "$s/"; fi; \
    done </tmp/files; \
    rm -rf "$s/usr/share/man" "$s/usr/share/doc"; \
    # Absolute link targets become relative ones inside the staged tree (computed in Python: `ln -r`
    # would follow the links, which point out of $s until converted).
    python3 -c "import os, sys; s = sys.argv[1]; \
      [(os.unlink(p), os.symlink(os.path.relpath(t, os.path.dirname(p[len(s):])), p)) \
       for d, dirs, files in os.walk(s) for p in (os.path.join(d, n) for n in dirs + files) \
       if os.path.islink(p) and (t := os.readlink(p)).startswith('/')]" "$s"; \
    # At runtime gpu-operator mounts the host's <driver root>/lib/firmware over /lib/firmware (docs/image.md).
    mkdir -p "$s/usr/share/nvidia/firmware"; \
    mv "$s/usr/lib/firmware/nvidia" "$s/usr/share/nvidia/firmware/nvidia"; \
    test -f "$s/usr/share/nvidia/firmware/nvidia/$v/gsp_tu10x.bin"; \
    echo "$v" >"$s/usr/share/nvidia/driver-version"; \
    if find "$s" -type l | while read -r l; do [ -e "$l" ] || echo "dangling $l"; done | grep .; then exit 1; fi

FROM python-base AS userspace-debian
COPY --from=nvidia-debian-layout /staging/ /

# ---------------------------------------------------------------------------------------------------
# A static shell for every route: Debian's busybox-static (/bin/busybox, 2 MB, no dependencies), which
# `init` publishes as bin/sh so that NVIDIA's DRA driver runs its MPS control daemon chrooted in the root
# (driver_container/publish/static_tools.py, docs/operator.md "MPS").
FROM python-base AS busybox
# hadolint DL3008 (apt versions unpinned): the Debian suite of the base image is the pin; an exact version leaves
# the archive at its next security update and would break every rebuild.
# hadolint ignore=DL3008
RUN set -eu; \
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends busybox-static; \
    mkdir -p /staging/usr/bin; cp -p "$(readlink -f /bin/busybox)" /staging/usr/bin/busybox

# ---------------------------------------------------------------------------------------------------
# Fabric Manager (and NVLSM) for NVSwitch / NVLink5 nodes (docs/fabric.md), optional:
#   FABRIC_SOURCE=none     (default) neither; NVSwitch nodes then get the FABRIC_MANAGER_MISSING error.
#   FABRIC_SOURCE=archive  NVIDIA's redist archives (fabricmanager-linux-<arch>-<driver>-archive.tar.xz,
#                          nvlsm-linux-<arch>-<v>-archive.tar.xz) or .deb packages (nvidia-fabricmanager-*,
#                          nvlsm) in .cache/fabric/ of the build context.
#   FABRIC_SOURCE=download the archives from NVIDIA_REDIST_BASE for DRIVER_VERSION (and NVLSM_VERSION when
#                          set), the URLs siderolabs/extensions' nvidia-fabricmanager package uses.
# Laid out as NVIDIA's packages install them; the final stage refuses a Fabric Manager of another version.
FROM python-base AS fabric-base
RUN mkdir -p /staging /fabric-in

FROM fabric-base AS fabric-get-none

FROM fabric-base AS fabric-get-archive
COPY .cache/fabri[c] /fabric-in/

FROM fabric-base AS fabric-get-download
ARG DRIVER_VERSION
ARG NVLSM_VERSION=""
ARG TARGETARCH
ARG NVIDIA_REDIST_BASE=https://developer.download.nvidia.com/compute
# hadolint DL3008 (apt versions unpinned): the Debian suite of the base image is the pin; an exact version leaves
# the archive at its next security update and would break every rebuild.
# hadolint DL3003 (cd): cd inside this RUN only; a WORKDIR would stay for every later instruction.
# hadolint ignore=DL3003,DL3008
RUN set -eu; \
    test -n "${DRIVER_VERSION}" || { echo "FABRIC_SOURCE=download needs DRIVER_VERSION" >&2; exit 1; }; \
    case "${TARGETARCH:-amd64}" in amd64) a=x86_64 ;; arm64) a=sbsa ;; esac; \
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ca-certificates curl; \
    cd /fabric-in; \
    curl -fsSLO --retry 3 "${NVIDIA_REDIST_BASE}/nvidia-driver/redist/fabricmanager/linux-$a/fabricmanager-linux-$a-${DRIVER_VERSION}-archive.tar.xz"; \
    if [ -n "${NVLSM_VERSION}" ]; then \
      curl -fsSLO --retry 3 "${NVIDIA_REDIST_BASE}/cuda/redist/nvlsm/linux-$a/nvlsm-linux-$a-${NVLSM_VERSION}-archive.tar.xz"; fi

# hadolint DL3006 (untagged FROM): a stage of this file chosen by a build argument, not an image.
# hadolint ignore=DL3006
FROM fabric-get-${FABRIC_SOURCE} AS fabric-layout
ARG TARGETARCH
# hadolint DL3008 (apt versions unpinned): the Debian suite of the base image is the pin; an exact version leaves
# the archive at its next security update and would break every rebuild.
# hadolint DL3003 (cd): cd inside this RUN only; a WORKDIR would stay for every later instruction.
# hadolint DL4006 (pipefail): the pipes only print a version; an empty one fails the final stage's comparison
# with the driver's version.
# hadolint ignore=DL3003,DL3008,DL4006
RUN set -eu; \
    s=/staging; cd /fabric-in; \
    case "${TARGETARCH:-amd64}" in amd64) triplet=x86_64-linux-gnu ;; arm64) triplet=aarch64-linux-gnu ;; esac; \
    if ls ./*.tar.xz >/dev/null 2>&1 && ! command -v xz >/dev/null; then \
      apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends xz-utils; fi; \
    for f in ./*.deb; do [ -f "$f" ] || continue; dpkg-deb -x "$f" "$s"; \
      case "$(dpkg-deb -f "$f" Package)" in nvidia-fabricmanager*) dpkg-deb -f "$f" Version | sed 's/-[^-]*$//' \
        >/tmp/fm-version ;; esac; done; \
    for f in ./fabricmanager-linux-*-archive.tar.xz; do [ -f "$f" ] || continue; \
      mkdir -p /tmp/fm && tar -xJf "$f" --strip-components=1 -C /tmp/fm; \
      install -D -m 0755 /tmp/fm/bin/nv-fabricmanager "$s/usr/bin/nv-fabricmanager"; \
      mkdir -p "$s/usr/lib/$triplet" "$s/usr/share/nvidia/nvswitch"; cp -a /tmp/fm/lib/libnvfm.so* "$s/usr/lib/$triplet/"; \
      cp -a /tmp/fm/share/nvidia/nvswitch/. "$s/usr/share/nvidia/nvswitch/"; \
      cp /tmp/fm/etc/fabricmanager.cfg "$s/usr/share/nvidia/nvswitch/fabricmanager.cfg"; \
      basename "$f" | sed -E 's/^fabricmanager-linux-[^-]+-(.*)-archive\.tar\.xz$/\1/' >/tmp/fm-version; done; \
    for f in ./nvlsm-linux-*-archive.tar.xz; do [ -f "$f" ] || continue; \
      mkdir -p /tmp/sm && tar -xJf "$f" --strip-components=1 -C /tmp/sm; \
      install -D -m 0755 /tmp/sm/sbin/nvlsm "$s/opt/nvidia/nvlsm/sbin/nvlsm"; \
      mkdir -p "$s/opt/nvidia/nvlsm/lib" "$s/usr/share/nvidia/nvlsm"; cp -a /tmp/sm/lib/. "$s/opt/nvidia/nvlsm/lib/"; \
      cp -a /tmp/sm/share/nvidia/nvlsm/. "$s/usr/share/nvidia/nvlsm/"; done; \
    if [ -f /tmp/fm-version ]; then \
      test -x "$s/usr/bin/nv-fabricmanager" && test -f "$s/usr/share/nvidia/nvswitch/fabricmanager.cfg"; \
      mkdir -p "$s/usr/share/nvidia"; cp /tmp/fm-version "$s/usr/share/nvidia/fabricmanager-version"; fi

# ---------------------------------------------------------------------------------------------------
# hadolint DL3006 (untagged FROM): a stage of this file chosen by a build argument, not an image.
# hadolint ignore=DL3006
FROM userspace-${USERSPACE_SOURCE} AS final
ARG DRIVER_VERSION=""
ARG USERSPACE_SOURCE
# The project's version (pyproject.toml, the one source): the build scripts pass it.
ARG VERSION
COPY --from=venv /opt/nvidia-driver /opt/nvidia-driver
COPY --from=fabric-layout /staging/ /
COPY --from=busybox /staging/ /
# This project's licence beside NVIDIA's (/licenses/NVIDIA, from the archive route's LICENSE).
COPY LICENSE NOTICE /licenses/talos-nvidia-driver-container/
# hadolint DL3003 (cd): cd in a subshell of this RUN, to run busybox as ./sh once.
# hadolint DL4006 (pipefail): ldd fails on every non-ELF file by design (its errors are discarded), and the pipe
# prints only what is missing: the checks that fail the build are the tests before it.
# hadolint ignore=DL3003,DL4006
RUN set -eu; \
    # Fabric Manager must be the driver's exact version (NVIDIA pins nvidia-fabricmanager=${DRIVER_VERSION}).
    if [ -f /usr/share/nvidia/fabricmanager-version ] && [ "$(cat /usr/share/nvidia/fabricmanager-version)" != \
         "$(cat /usr/share/nvidia/driver-version)" ]; then \
      echo "Fabric Manager $(cat /usr/share/nvidia/fabricmanager-version) is not driver $(cat /usr/share/nvidia/driver-version)" >&2; \
      exit 1; fi; \
    ln -sf /opt/nvidia-driver/bin/nvidia-driver /usr/local/bin/nvidia-driver; \
    ln -sf /opt/nvidia-driver/bin/driver-manager /usr/local/bin/driver-manager; \
    # gpu-operator's GDS/GDRCopy sidecars, with this image as theirs, run `bash -xc "until [ -d
    # /run/nvidia/driver/usr/src ] && lsmod | grep nvidia; ...; exec nvidia-gds-driver install"` and probe
    # with `lsmod | grep nvidia_fs` (NVIDIA/gpu-operator 10ee5b36 object_controls.go transformGDSContainer):
    # busybox's lsmod reads /proc/modules as kmod's does.
    ln -sf /opt/nvidia-driver/bin/nvidia-gds-driver /usr/local/bin/nvidia-gds-driver; \
    ln -sf /opt/nvidia-driver/bin/nvidia-gdrcopy-driver /usr/local/bin/nvidia-gdrcopy-driver; \
    command -v lsmod >/dev/null || ln -s /usr/bin/busybox /usr/local/bin/lsmod; \
    # The operator's startup probe runs sh, cat, mkdir, mv, rm and nvidia-smi from PATH.
    for t in sh cat mkdir mv rm nvidia-smi ldconfig bash grep lsmod nvidia-gds-driver nvidia-gdrcopy-driver; do \
      command -v "$t" >/dev/null || { echo "missing $t" >&2; exit 1; }; done; \
    # The shell the root gets as bin/sh: busybox runs the applet argv[0] names.
    test "$(cd /tmp && ln -s /usr/bin/busybox sh && ./sh -c 'echo ok'; rm -f /tmp/sh)" = ok; \
    # ldconfig runs as `ldconfig -r <driver root>` on a root without libc: it must be static (no PT_INTERP).
    python3 -c "import struct,sys; d=open('/sbin/ldconfig','rb').read(); o,=struct.unpack_from('<Q',d,32); \
      e,n=struct.unpack_from('<HH',d,54); sys.exit(any(struct.unpack_from('<I',d,o+i*e)[0]==3 for i in range(n)))" \
      || { echo "/sbin/ldconfig has an ELF interpreter (PT_INTERP): not static" >&2; exit 1; }; \
    ldconfig; \
    # Every NVIDIA ELF file finds its libraries in this image: an error for the Debian route, which copies
    # NVIDIA's files without their dependencies; a warning for the installer routes, whose GTK/Wayland
    # helper libraries need desktop libraries that a driver container never loads.
    find / -xdev -type f \( -path '*nvidia*' -o -name 'libcuda*' \) ! -path '/opt/*' ! -path '/proc/*' \
      | while read -r f; do ldd "$f" 2>/dev/null | sed -n "s|^\t\(.*\) => not found|$f needs \1|p"; done >/tmp/missing; \
    if [ -s /tmp/missing ]; then \
      cat /tmp/missing >&2; [ "${USERSPACE_SOURCE}" != debian ] || exit 1; echo "(warning only)" >&2; fi; \
    rm -f /tmp/missing; \
    # The digest index (docs/image.md): size, mtime, sha256 and ELF facts of every file a publish reads,
    # so that `init` copies them in the kernel without hashing or parsing them. After ldconfig (the scan
    # reads /etc/ld.so.cache) and after every file is in place; nothing below may change those files.
    nvidia-driver index-userspace --version "$(cat /usr/share/nvidia/driver-version)"; \
    nvidia-driver --help >/dev/null
# What is whose: the image (entrypoint, layout) is this project's, under Apache-2.0; the NVIDIA userspace in it
# is NVIDIA's, under NVIDIA's licence (/licenses/NVIDIA); io.nvidia.driver.* say which driver and from where
# (the archive route also records the archive's URL and hashes in /usr/share/nvidia/driver-archive).
LABEL org.opencontainers.image.title="talos-nvidia-driver-container" \
      org.opencontainers.image.description="NVIDIA driver userspace (NVIDIA's, under NVIDIA's licence) and this project's entrypoint for Talos Linux (gpu-operator driver image)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0 AND LicenseRef-NVIDIA-Driver" \
      org.opencontainers.image.vendor="talos-nvidia-driver-container (not NVIDIA)" \
      io.nvidia.driver.version="${DRIVER_VERSION}" \
      io.nvidia.driver.userspace-source="${USERSPACE_SOURCE}"
ENV NVIDIA_VISIBLE_DEVICES=void \
    PYTHONDONTWRITEBYTECODE=1 \
    TYPER_USE_RICH=0
ENTRYPOINT ["nvidia-driver"]
CMD ["init"]
