# shellcheck shell=bash
# Sourced by scripts/setup.sh and scripts/release-build.sh: `docker_build ARGS...` runs a BuildKit build
# and loads the result into the local engine. BuildKit is required by the Dockerfile (stage selection by
# USERSPACE_SOURCE, TARGETARCH). A Docker 23+ client without the buildx plugin only has the legacy
# builder, while Debian's docker.io 20.10 client still has BuildKit built in: use whichever can.
docker_build() {
  if docker buildx version >/dev/null 2>&1; then
    docker buildx build --load "$@"
  elif [[ -x /usr/bin/docker ]] && /usr/bin/docker version -f '{{.Client.Version}}' 2>/dev/null | grep -Eq '^(19|20|21|22)\.'; then
    DOCKER_BUILDKIT=1 /usr/bin/docker build "$@"
  else
    printf 'docker_build: no BuildKit-capable docker client (install docker-buildx or Debian'"'"'s docker.io)\n' >&2
    return 1
  fi
}
