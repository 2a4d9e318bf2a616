#!/usr/bin/env bash
# Start or stop a Docker engine for the container tests (CI machines start with none running).
#
#   scripts/dockerd.sh start   start `dockerd --iptables=false` in the background unless an engine already
#                              answers on /var/run/docker.sock; wait until it does (log: .cache/dockerd.log)
#   scripts/dockerd.sh stop    stop the engine this script started (pid in .cache/dockerd.pid); an engine
#                              started by someone else is left alone
#   scripts/dockerd.sh status  exit 0 when an engine answers
#
# --iptables=false: the test machines have no usable iptables/NAT; builds and tests use --network host.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$REPO/.cache"
PIDFILE="$CACHE/dockerd.pid"
LOG="$CACHE/dockerd.log"
SOCK="${DOCKER_SOCK:-/var/run/docker.sock}"
WAIT_S="${DOCKERD_WAIT_S:-60}"

log() { printf 'dockerd.sh: %s\n' "$*" >&2; }

answers() {  # the engine answers an API ping (curl-free: bash's /dev/tcp cannot do unix sockets)
  [[ -S "$SOCK" ]] && python3 - "$SOCK" <<'PY' >/dev/null 2>&1
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(2)
s.connect(sys.argv[1])
s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
sys.exit(0 if b" 200 " in s.recv(64) else 1)
PY
}

start() {
  if answers; then log "engine already running on $SOCK"; return 0; fi
  command -v dockerd >/dev/null || { log "dockerd missing: apt-get install -y docker.io"; return 1; }
  mkdir -p "$CACHE"
  log "starting dockerd (log: $LOG)"
  setsid dockerd --iptables=false >>"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  local waited=0
  until answers; do
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      log "dockerd exited; last log lines:"; tail -20 "$LOG" >&2; rm -f "$PIDFILE"; return 1
    fi
    (( waited++ < WAIT_S * 2 )) || { log "no answer on $SOCK after ${WAIT_S}s"; tail -20 "$LOG" >&2; return 1; }
    sleep 0.5
  done
  log "engine up (pid $(cat "$PIDFILE"))"
}

stop() {
  [[ -f "$PIDFILE" ]] || { log "no engine started by this script"; return 0; }
  local pid; pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    # dockerd stops its containers (10 s grace each) and its containerd before exiting.
    for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && { log "dockerd $pid ignored SIGTERM; sending SIGKILL"; kill -KILL "$pid"; }
  fi
  rm -f "$PIDFILE"
  log "engine stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) answers ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
