# shellcheck shell=bash
# Shared by up.sh and down.sh (sourced, never run).

KUBE_HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$KUBE_HACK_DIR/../.." && pwd)
LAB=$REPO/.kube-lab                   # this checkout's state: env, error, logs, certs, etcd data
ENV_FILE=$LAB/env
ERROR_FILE=$LAB/error
RUN=$LAB/run
DAEMONS="etcd apiserver"              # start order

ROOTFS=${KUBE_LAB_ROOTFS:-/var/cache/slinky-mc/kube-sid}
case $ROOTFS in /*) ;; *) ROOTFS=$(pwd)/$ROOTFS ;; esac
ROOTFS=${ROOTFS%/}
API_PORT=${KUBE_LAB_PORT:-16443}
ETCD_PORT=${KUBE_LAB_ETCD_PORT:-16379}   # client; the peer port is the next one

_t0=$EPOCHREALTIME
log() {
  local line
  line=$(printf '[kube-lab %s %5.1fs] %s' "${LOG_TAG:-}" "$(awk -v a="$_t0" -v b="$EPOCHREALTIME" 'BEGIN{print b-a}')" "$*")
  echo "$line" >&2
  if [ -n "${LOG_FILE:-}" ]; then echo "$line" 2>/dev/null >>"$LOG_FILE" || true; fi
}

# --- PIDs. A pid file holds "PID STARTTIME": the start time guards against PID reuse.
proc_starttime() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null; }
proc_alive() { [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
pidfile_live() {  # pidfile_live NAME -> prints the PID if the recorded process is still that process
  local f=$RUN/pids/$1 pid st
  [ -s "$f" ] || return 1
  read -r pid st <"$f" || true
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  proc_alive "$pid" && [ "$(proc_starttime "$pid")" = "$st" ] || return 1
  echo "$pid"
}
record_pid() { mkdir -p "$RUN/pids" && echo "$2 $(proc_starttime "$2")" >"$RUN/pids/$1"; }
all_daemons_live() {
  local d
  for d in $DAEMONS; do pidfile_live "$d" >/dev/null || return 1; done
}

stop_daemon() {  # TERM, wait up to 10 s, then KILL
  local name=$1 pid i
  if pid=$(pidfile_live "$name"); then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do proc_alive "$pid" || break; sleep 0.1; done
    if proc_alive "$pid"; then
      log "$name ($pid) ignored SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    log "stopped $name ($pid)"
  fi
  rm -f "$RUN/pids/$name"
}

stop_lab() {  # reverse start order
  local d rev=""
  for d in $DAEMONS; do rev="$d $rev"; done
  for d in $rev; do stop_daemon "$d"; done
}
