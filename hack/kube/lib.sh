# shellcheck shell=bash
# Shared by up.sh and down.sh (sourced, never run).

KUBE_HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$KUBE_HACK_DIR/../.." && pwd)
# shellcheck source=../lib/proc.sh
. "$REPO/hack/lib/proc.sh"
LAB_NAME=kube-lab
# this checkout's state: env, error, logs, certs, etcd data (the cluster lab keeps its own server here)
LAB=$(abs_path "${KUBE_LAB_DIR:-$REPO/.kube-lab}")
ENV_FILE=$LAB/env
ERROR_FILE=$LAB/error
RUN=$LAB/run
DAEMONS="etcd apiserver"              # start order

ROOTFS=$(abs_path "${KUBE_LAB_ROOTFS:-/var/cache/slinky-mc/kube-sid}")
API_PORT=${KUBE_LAB_PORT:-16443}
ETCD_PORT=${KUBE_LAB_ETCD_PORT:-16379}   # client; the peer port is the next one
read -r -a SERVER_ARGS <<<"${KUBE_LAB_SERVER_ARGS:-}"   # extra API server flags (the cluster lab's)

# PIDs, log and stopping: hack/lib/proc.sh. Our daemons run on the host (no chroot): any live process
# with the recorded start time is ours.
record_pid() { mkdir -p "$RUN/pids" && echo "$2 $(proc_starttime "$2")" >"$RUN/pids/$1"; }
stop_lab() { stop_daemons; }
