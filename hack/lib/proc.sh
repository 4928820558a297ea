# shellcheck shell=bash
# Process helpers shared by the labs' libraries (hack/slurm/lib.sh, hack/kube/lib.sh); sourced, never run.
# The library that sources this sets LAB_NAME (the log prefix), RUN (pid files live in $RUN/pids) and
# DAEMONS (start order), and may redefine proc_is_ours to narrow which live process a pid file may name.

_t0=$EPOCHREALTIME
log() {
  local elapsed line
  elapsed=$(awk -v a="$_t0" -v b="$EPOCHREALTIME" 'BEGIN{print b-a}')
  line=$(printf '[%s %s %5.1fs] %s' "$LAB_NAME" "${LOG_TAG:-}" "$elapsed" "$*")
  echo "$line" >&2
  if [ -n "${LOG_FILE:-}" ]; then echo "$line" 2>/dev/null >>"$LOG_FILE" || true; fi
}

# abs_path PATH -> PATH made absolute against the working directory, without a trailing slash
abs_path() {
  local p=$1
  case $p in /*) ;; *) p=$(pwd)/$p ;; esac
  echo "${p%/}"
}

# --- PIDs. A pid file holds "PID STARTTIME": the start time guards against PID reuse.
proc_starttime() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null; }
proc_alive() {  # zombies count as dead: PID 1 here reaps lazily
  [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}
proc_is_ours() { return 0; }  # every live process with the recorded start time, unless the lab narrows it
# pidfile_live NAME -> prints the PID if the recorded process is still that process
pidfile_live() {
  local f=$RUN/pids/$1 pid st
  [ -s "$f" ] || return 1
  read -r pid st <"$f" || true
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  proc_alive "$pid" || return 1
  [ "$(proc_starttime "$pid")" = "$st" ] || return 1
  proc_is_ours "$pid" || return 1
  echo "$pid"
}
all_daemons_live() {
  local d
  for d in $DAEMONS; do pidfile_live "$d" >/dev/null || return 1; done
}

# TERM, wait up to 10 s, then KILL one recorded daemon.
stop_daemon() {
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
  return 0
}
stop_daemons() {  # reverse start order
  local d rev=""
  for d in $DAEMONS; do rev="$d $rev"; done
  for d in $rev; do stop_daemon "$d"; done
}
