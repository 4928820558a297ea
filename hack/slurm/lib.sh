# shellcheck shell=bash
# Shared by up.sh, down.sh and exec.sh (sourced, never run). Host side only:
# cluster.sh is what runs inside the chroot.

SLURM_HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SLURM_HACK_DIR/../.." && pwd)
# shellcheck source=../lib/proc.sh
. "$REPO/hack/lib/proc.sh"
LAB_NAME=slurm-lab
LAB=$REPO/.slurm-lab                  # host-side state of this checkout: env, error, logs
ENV_FILE=$LAB/env
ERROR_FILE=$LAB/error
INNER_DIR=/var/lib/slinky-lab         # runtime dir as the daemons see it (inside the chroot)
CHROOT_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
DAEMONS="munged slurmctld slurmd-n1 slurmd-n2 slurmd-n3 slurmd-n4 slurmrestd"  # start order

DEFAULT_ROOTFS=/var/cache/slinky-mc/slurm-sid
RECORDED_ROOTFS=$(cat "$LAB/rootfs" 2>/dev/null || true)   # where this checkout's lab last ran
# set_rootfs PATH: the lab's rootfs, and RUN, its runtime dir seen from the host
set_rootfs() {
  ROOTFS=$(abs_path "$1")
  RUN=$ROOTFS$INNER_DIR
}
# up.sh builds/uses $SLURM_LAB_ROOTFS or the default; down.sh and exec.sh follow the record
if [ "${HACK_ROLE:-}" = up ]; then
  set_rootfs "${SLURM_LAB_ROOTFS:-$DEFAULT_ROOTFS}"
else
  set_rootfs "${SLURM_LAB_ROOTFS:-${RECORDED_ROOTFS:-$DEFAULT_ROOTFS}}"
fi

# Our daemons must never see SLURM_* from the caller (a sourced env file exporting
# SLURM_JWT makes slurmctld speak auth/jwt and die); settings were read above.
scrub_slurm_env() {
  local v
  for v in $(compgen -e | grep -E '^SLURM' || true); do unset "$v"; done
}

# --- PIDs (hack/lib/proc.sh): only processes inside this lab's chroot count as ours
proc_in_rootfs() { [ "$(readlink "/proc/$1/root" 2>/dev/null)" = "$ROOTFS" ]; }
proc_is_ours() { proc_in_rootfs "$1"; }
any_pidfile() { compgen -G "$RUN/pids/*" >/dev/null; }

# --- chroot helpers
mounted() { mountpoint -q "$1" 2>/dev/null; }
mounts_under() { findmnt -rn -o TARGET | awk -v r="$1" '$0 == r || index($0, r "/") == 1'; }
# in_chroot [-t SECS] CMD... : run a command in the lab chroot with a clean environment
in_chroot() {
  local limit=()
  if [ "$1" = -t ]; then limit=(timeout "$2"); shift 2; fi
  (cd / && exec "${limit[@]}" chroot "$ROOTFS" /usr/bin/env -i PATH="$CHROOT_PATH" HOME=/root \
     LANG=C.UTF-8 SLURM_CONF="$INNER_DIR/etc/slurm.conf" "$@")
}

# slurmstepd double-forks into its own session, so it outlives slurmd. Find the ones
# holding a Unix socket under OUR spool dir and kill their whole session (stepd + job).
kill_stray_stepds() {
  local inodes fd target ino pid sid q killed=""
  inodes=$(awk -v d="$INNER_DIR/spool/" 'index($8, d) == 1 {print $7}' /proc/net/unix 2>/dev/null | sort -u)
  [ -n "$inodes" ] || return 0
  for fd in /proc/[0-9]*/fd/*; do
    target=$(readlink "$fd" 2>/dev/null) || continue
    case $target in socket:\[*\]) ;; *) continue ;; esac
    ino=${target#socket:[}; ino=${ino%]}
    grep -qx "$ino" <<<"$inodes" || continue
    pid=${fd#/proc/}; pid=${pid%%/*}
    proc_in_rootfs "$pid" || continue
    sid=$(awk '{print $6}' "/proc/$pid/stat" 2>/dev/null) || continue
    # never our own session or init's
    [ -n "$sid" ] && [ "$sid" -gt 1 ] && [ "$sid" != "$(awk '{print $6}' /proc/$$/stat)" ] || continue
    case " $killed " in *" $sid "*) continue ;; esac
    killed="$killed $sid"
    for q in /proc/[0-9]*; do
      q=${q#/proc/}
      [ "$(awk '{print $6}' "/proc/$q/stat" 2>/dev/null)" = "$sid" ] && proc_in_rootfs "$q" || continue
      if kill -KILL "$q" 2>/dev/null; then log "killed leftover job process $q (session $sid)"; fi
    done
  done
  return 0
}

# Cancel jobs (while slurmctld can still clean up), then stop daemons in reverse order.
stop_lab() {
  local d jobs i
  [ -d "$RUN/pids" ] || return 0
  if pidfile_live slurmctld >/dev/null && mounted "$ROOTFS/proc"; then
    jobs=$(in_chroot -t 10 squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)
    if [ -n "${jobs// /}" ]; then
      log "cancelling jobs: $jobs"
      # shellcheck disable=SC2086
      in_chroot -t 10 scancel $jobs >/dev/null 2>&1 || true
      for i in $(seq 1 100); do
        [ -z "$(in_chroot -t 5 squeue -h -o %A 2>/dev/null)" ] && break
        sleep 0.1
      done
    fi
  fi
  stop_daemons
  # anything else recorded (e.g. by an older version of the scripts)
  for d in "$RUN"/pids/*; do if [ -e "$d" ]; then stop_daemon "$(basename "$d")"; fi; done
  kill_stray_stepds
  return 0
}

unmount_chroot() {
  local m others
  others=$(for p in /proc/[0-9]*; do p=${p#/proc/}; if proc_in_rootfs "$p"; then echo "$p"; fi; done | tr '\n' ' ')
  [ -z "${others// /}" ] || log "warning: processes still running in $ROOTFS: $others"
  for m in dev proc; do
    if mounted "$ROOTFS/$m"; then
      umount "$ROOTFS/$m" 2>/dev/null || umount -l "$ROOTFS/$m"
    fi
  done
  return 0
}
