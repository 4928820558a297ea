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
# any container process the stand-in could not stop (its root is under the lab's pods)
for p in /proc/[0-9]*; do
  case $(readlink "$p/root" 2>/dev/null) in "$LAB"/pods/*) kill -KILL "${p#/proc/}" 2>/dev/null || true ;; esac
done
for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^cl-/ {print $1}'); do ip netns del "$ns" || true; done
for link in $(ip -o link show 2>/dev/null | awk -F': ' '$2 ~ /^cv/ {sub(/@.*/, "", $2); print $2}'); do ip link del "$link" 2>/dev/null || true; done
ip link del clbr0 2>/dev/null || true
kube_lab down >/dev/null 2>&1 || true
rm -rf "$LAB/pods"
log "down"
