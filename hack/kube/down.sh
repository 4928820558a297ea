#!/bin/bash
# down.sh - stop the API server and etcd that up.sh started (by their recorded PIDs only).
# Safe to run when nothing is up. Logs stay in .kube-lab/logs.
#   --purge   also delete the cached rootfs and builds ($KUBE_LAB_ROOTFS)
set -euo pipefail
# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
LOG_TAG=down

PURGE=0
case ${1:-} in
  --purge) PURGE=1 ;;
  "") ;;
  *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
esac
[ -d "$LAB" ] && LOG_FILE=$LAB/up.log

rm -f "$ENV_FILE"
stop_lab
if [ "$PURGE" = 1 ] && [ -d "$ROOTFS" ]; then
  exec 9>"$ROOTFS.lock"
  flock -w 300 9 || { log "timed out waiting for $ROOTFS.lock"; exit 1; }
  rm -rf --one-file-system "$ROOTFS"
  log "purged $ROOTFS"
fi
log "down"
