#!/bin/bash
# down.sh - stop the cluster lab: slurm_sync, the stand-ins (which stop every pod's processes), the hook
# server, a real Metacontroller if one was given, the API server; then remove every network namespace,
# veth and the bridge the lab made. Safe when nothing is up. Logs stay in .cluster-lab/logs.
set -euo pipefail
# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
LOG_TAG=down
[ -d "$LAB" ] || exit 0
LOG_FILE=$LAB/up.log
rm -f "$ENV_FILE"
DAEMONS="$DAEMONS metacontroller"
stop_daemons
# any container the stand-in could not stop: killing the PID 1 of its PID namespace (the child of the
# `unshare` that runs this checkout's container.sh) ends every process in it
for p in /proc/[0-9]*; do
  pid=${p#/proc/}
  grep -qF "$CLUSTER_HACK_DIR/container.sh" "$p/cmdline" 2>/dev/null || continue
  for child in $(cat "$p/task/$pid/children" 2>/dev/null); do kill -KILL "$child" 2>/dev/null || true; done
  kill -KILL "$pid" 2>/dev/null || true
done
for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^cl-/ {print $1}'); do ip netns del "$ns" || true; done
for link in $(ip -o link show 2>/dev/null | awk -F': ' '$2 ~ /^cv/ {sub(/@.*/, "", $2); print $2}'); do ip link del "$link" 2>/dev/null || true; done
ip link del clbr0 2>/dev/null || true
kube_lab down >/dev/null 2>&1 || true
rm -rf "$LAB/pods"
log "down"
