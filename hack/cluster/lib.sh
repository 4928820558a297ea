# shellcheck shell=bash
# Shared by the cluster lab's up.sh and down.sh (sourced, never run).
CLUSTER_HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$CLUSTER_HACK_DIR/../.." && pwd)
# shellcheck source=../lib/proc.sh
. "$REPO/hack/lib/proc.sh"
# shellcheck source=../lib/apt.sh
. "$REPO/hack/lib/apt.sh"
LAB_NAME=cluster-lab
LAB=$REPO/.cluster-lab                # env, logs, pods (one directory each), claims, the API server's state
ENV_FILE=$LAB/env
ERROR_FILE=$LAB/error
RUN=$LAB/run
DAEMONS="hooks lab slurm-sync slurm-sync-b"  # start order (the API server is hack/kube's, in $LAB/kube)
ROOTFS=${CLUSTER_LAB_ROOTFS:-/var/cache/slinky-mc/cluster-sid}
API_PORT=${CLUSTER_LAB_API_PORT:-17443}
ETCD_PORT=${CLUSTER_LAB_ETCD_PORT:-17379}
HOOKS_PORT=${CLUSTER_LAB_HOOKS_PORT:-18080}
SYNC_PORT=${CLUSTER_LAB_SYNC_PORT:-18081}
SYNC_PORT_B=${CLUSTER_LAB_SYNC_PORT_B:-18084}
PY=$REPO/.venv/bin/python
OPERATOR_NAMESPACE=slinky   # docs/getting-started.md's namespace for charts/slurm-operator
AUDIT_LOG=$LAB/logs/audit.log   # every ServiceAccount's requests (audit-policy.yaml)
GATEWAY=10.77.0.1           # the lab bridge's address (lab/runtime.py's GATEWAY), where pods reach the API server
# the API server lab of hack/kube, on the cluster lab's own ports and directory; its certificate names the
# gateway too, where pods' in-cluster clients reach it through the lab's relay (lab/proxy.py)
kube_lab() {
  KUBE_LAB_DIR=$LAB/kube KUBE_LAB_PORT=$API_PORT KUBE_LAB_ETCD_PORT=$ETCD_PORT \
    KUBE_LAB_SERVER_ARGS="--graceful-pod-deletion --alternate-ips=$GATEWAY --admission-webhooks --audit-log-path=$AUDIT_LOG --audit-policy-file=$CLUSTER_HACK_DIR/audit-policy.yaml" \
    "$REPO/hack/kube/$1.sh" "${@:2}"
}
record_pid() { mkdir -p "$RUN/pids" && echo "$2 $(proc_starttime "$2")" >"$RUN/pids/$1"; }
