#!/bin/bash
# down.sh - stop the Slurm lab that up.sh started, then unmount its chroot.
# Cancels jobs first, then stops only the PIDs up.sh recorded (reverse start order,
# TERM then KILL) and any slurmstepd sessions holding sockets in the lab's spool dir.
# Never kills by process name. Safe to run when nothing is up. Logs stay in .slurm-lab/.
#   --purge   also delete the cached rootfs (refused while anything is mounted under it)
set -euo pipefail
# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
LOG_TAG=down
scrub_slurm_env

PURGE=0
case ${1:-} in
  --purge) PURGE=1 ;;
  "") ;;
  *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
esac
[ -d "$LAB" ] && LOG_FILE=$LAB/up.log

if [ ! -d "$ROOTFS" ]; then
  rm -f "$ENV_FILE"
  log "nothing to stop (no rootfs at $ROOTFS)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  if any_pidfile 2>/dev/null || mounted "$ROOTFS/proc" || mounted "$ROOTFS/dev"; then
    echo "hack/slurm/down.sh must run as root to stop the lab in $ROOTFS" >&2; exit 1
  fi
  rm -f "$ENV_FILE"; log "nothing to stop"; exit 0
fi

exec 9>"$ROOTFS.lock"
flock -w 300 9 || { log "timed out waiting for $ROOTFS.lock"; exit 1; }

# A lab started from another checkout that still exists is not ours to stop.
owner=$(cat "$RUN/owner" 2>/dev/null || true)
if [ -n "$owner" ] && [ "$owner" != "$REPO" ] && [ -d "$owner" ] && all_daemons_live; then
  log "the lab in $ROOTFS belongs to $owner; leaving it running"
  rm -f "$ENV_FILE"
  [ "$PURGE" = 0 ] || { log "refusing to purge $ROOTFS while $owner's lab runs in it"; exit 1; }
  exit 0
fi

rm -f "$ENV_FILE"     # from here on the lab is not usable
if any_pidfile; then log "stopping the lab in $ROOTFS"; fi
stop_lab
unmount_chroot
rm -f "$RUN/owner"

if [ "$PURGE" = 1 ]; then
  left=$(mounts_under "$ROOTFS")
  if [ -n "$left" ]; then
    log "refusing to purge $ROOTFS: still mounted under it: $(echo "$left" | tr '\n' ' ')"
    exit 1
  fi
  rm -rf --one-file-system "$ROOTFS"
  rm -f "$LAB/rootfs" "$LAB/logs"
  log "purged $ROOTFS"
fi
log "down"
