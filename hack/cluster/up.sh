#!/bin/bash
# up.sh - the cluster lab: a whole Slurm cluster on this machine, from its custom resources.
#
# A development and test tool (docs/cluster-lab.md), not a way to run production. Real: the API server
# (hack/kube's, with graceful pod deletion, ServiceAccount tokens and RBAC), the operator as a user installs
# it (docs/getting-started.md: `helm install` of charts/slurm-operator, whose Deployments run the hook server
# and two slurm_sync replicas from the project's image under their own ServiceAccounts) and every daemon
# the pods run (the Debian sid packages of hack/cluster/rootfs.sh: slurmctld, slurmd, slurmrestd, slurmdbd,
# sackd, sshd, MariaDB). Stand-ins, all in `python -m lab` (hack/cluster/lab/): Metacontroller (unless
# METACONTROLLER=/path/to/binary is given), the StatefulSet/Deployment/PVC controllers, and kube-scheduler
# plus the kubelets of the lab Nodes, which run each container as a process tree in the pod's network
# namespace (the project's image from its own unpacked filesystem).
#
# Applies Metacontroller's CRDs, installs the operator chart, makes what a user brings (namespace slurm, a
# MariaDB and its password, the login key), installs the Slurm cluster with `helm install slurm charts/slurm
# -f hack/cluster/slurm-values.yaml` (docs/getting-started.md, step 5),
# waits until every custom resource is Ready, prints the time taken, and writes .cluster-lab/env
# (sourceable: KUBECONFIG, the URLs, CLUSTER_LAB_*). On failure: exit 1, one line in
# .cluster-lab/error, and what was started is stopped. Stop with down.sh.
#
# Settings (environment): CLUSTER_LAB_ROOTFS, CLUSTER_LAB_API_PORT (17443), CLUSTER_LAB_ETCD_PORT (17379),
# CLUSTER_LAB_HOOKS_PORT (18080), CLUSTER_LAB_SYNC_PORT (18081) and CLUSTER_LAB_SYNC_PORT_B (18084) for
# the two slurm_sync replicas, CLUSTER_LAB_TIMEOUT (300 s to Ready), CLUSTER_LAB_NODES (10: room for every
# worker pod of the tests at once, the elastic ones too), METACONTROLLER (a metacontroller binary to use instead of the stand-in),
# CLUSTER_LAB_IMAGE (the image the operator chart runs; default: hack/image.sh --ci's, built when missing),
# CLUSTER_LAB_OPERATOR: `chart` (the default, what CI runs) or `worktree`, the developer's switch: the hook
# server (gunicorn, as `make run`) and two slurm_sync replicas run on the host from this work tree and its
# venv, and the CRDs and CompositeControllers are applied from the tree (a change is tried without a build);
# CLUSTER_LAB_CLUSTER: `chart` (the default) or `examples`: the same cluster applied from examples/crs/ with
# real keys and hack/cluster/lab-patches.yaml, without Helm.
set -Eeuo pipefail
# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
LOG_TAG=up
TIMEOUT=${CLUSTER_LAB_TIMEOUT:-300}
NODES=${CLUSTER_LAB_NODES:-10}
METACONTROLLER=${METACONTROLLER:-}
OPERATOR=${CLUSTER_LAB_OPERATOR:-chart}
CLUSTER=${CLUSTER_LAB_CLUSTER:-chart}
HELM=$REPO/.cache/bin/helm
KUBECTL=$REPO/.cache/bin/kubectl
mkdir -p "$LAB/logs" "$RUN"
LOG_FILE=$LAB/up.log
echo "=== up.sh $(date -u +%FT%TZ)" >>"$LOG_FILE"

STARTED=0
ERR_AT=""
fail() { echo "$*" >"$ERROR_FILE"; log "ERROR: $*"; exit 1; }
on_exit() {
  local rc=$?
  [ "$rc" = 0 ] && return 0
  [ -s "$ERROR_FILE" ] || echo "hack/cluster/up.sh failed (exit $rc) at ${ERR_AT:-an unknown step}; see $LOG_FILE" >"$ERROR_FILE"
  if [ "$STARTED" = 1 ]; then log "stopping what was started (logs stay in $LAB/logs/)"; "$CLUSTER_HACK_DIR/down.sh" || true; fi
}
trap 'ERR_AT="line $LINENO: $BASH_COMMAND"' ERR
trap on_exit EXIT

[ "$(id -u)" = 0 ] || fail "the cluster lab needs root (network namespaces, mounts, chroot): run 'sudo make cluster-up'"
# The host tools the lab and its tests use (ssh logs in to the login pod), installed from Debian when missing.
missing=""
for pair in ip:iproute2 nsenter:util-linux unshare:util-linux curl:curl ssh:openssh-client ssh-keygen:openssh-client; do
  command -v "${pair%%:*}" >/dev/null || missing="$missing ${pair#*:}"
done
if [ -n "$missing" ]; then
  log "installing on the host:$missing"
  # shellcheck disable=SC2086 # one word per package
  apt_install "$LAB/apt.log" $missing || fail "apt-get could not install$missing; see $LAB/apt.log"
fi
for tool in ip nsenter unshare chroot mount setsid curl ssh ssh-keygen; do
  command -v "$tool" >/dev/null || fail "$tool is missing on this host"
done
[ -x "$PY" ] || fail "no project venv at $REPO/.venv: run 'make cluster-up' (it makes one)"
[ -x "$KUBECTL" ] || fail "no kubectl at $KUBECTL: run 'make cluster-up' (it installs one)"
if [ -n "$METACONTROLLER" ] && [ ! -x "$METACONTROLLER" ]; then fail "METACONTROLLER=$METACONTROLLER is not an executable"; fi
if [ -n "$METACONTROLLER" ] && [ "$OPERATOR" = chart ]; then
  fail "METACONTROLLER= runs on the host, where the chart's hook Service has no name: use it with CLUSTER_LAB_OPERATOR=worktree"
fi
case $OPERATOR in
  chart) DAEMONS=lab; [ -x "$HELM" ] || fail "no helm at $HELM: run 'make cluster-up' (it installs one)" ;;
  worktree) ;;
  *) fail "CLUSTER_LAB_OPERATOR=$OPERATOR: want chart (the operator chart, from the image) or worktree" ;;
esac
case $CLUSTER in
  chart) [ -x "$HELM" ] || fail "no helm at $HELM: run 'make cluster-up' (it installs one)" ;;
  examples) ;;
  *) fail "CLUSTER_LAB_CLUSTER=$CLUSTER: want chart (helm install of charts/slurm) or examples (examples/crs/)" ;;
esac
if all_daemons_live; then log "already up; nothing to do (down.sh first to start afresh)"; exit 0; fi
rm -f "$ERROR_FILE" "$ENV_FILE"   # only now: a lab found already up keeps its env file

t0=$SECONDS
"$CLUSTER_HACK_DIR/rootfs.sh" 2>&1 | tee -a "$LOG_FILE" >&2 || fail "the cluster lab's root filesystem could not be built; see $LOG_FILE"
IMAGE_ARGS=()
if [ "$OPERATOR" = chart ]; then
  IMAGE=${CLUSTER_LAB_IMAGE:-$("$REPO/hack/image.sh" --ci 2>>"$LOG_FILE")} || fail "the image could not be built; see $LOG_FILE"
  unpacked=$("$CLUSTER_HACK_DIR/image-rootfs.sh" "$IMAGE" 2>>"$LOG_FILE") || fail "the image $IMAGE could not be unpacked; see $LOG_FILE"
  IMAGE_ARGS=(--image "$IMAGE=$unpacked")
  log "the operator runs $IMAGE (unpacked in $unpacked)"
fi
STARTED=1
"$CLUSTER_HACK_DIR/down.sh" >/dev/null 2>&1 || true   # leftovers of an earlier run
rm -rf "$LAB/pvc" "$LAB/pods" "$LAB/logs/pods" "$LAB/hold" "$LAB/resolv.conf" "$LAB/hosts" "$AUDIT_LOG"
kube_lab up 2>&1 | tee -a "$LOG_FILE" >&2 || fail "the API server did not start: $(cat "$LAB/kube/error" 2>/dev/null)"
export KUBECONFIG=$LAB/kube/kubeconfig
mkdir -p "$LAB/logs"

SETUP_ARGS=()
if [ "$OPERATOR" = chart ]; then
  # docs/getting-started.md, steps 2 and 4: Metacontroller's CRDs (its install's), then the operator chart
  log "installing the operator: helm install slurm-operator charts/slurm-operator -n $OPERATOR_NAMESPACE (image $IMAGE)"
  { "$KUBECTL" apply -f "$CLUSTER_HACK_DIR/metacontroller-crds.yaml" \
      && "$KUBECTL" wait --for=condition=Established --timeout=60s -f "$CLUSTER_HACK_DIR/metacontroller-crds.yaml" \
      && "$HELM" install slurm-operator "$REPO/charts/slurm-operator" -n "$OPERATOR_NAMESPACE" --create-namespace \
           --set "image.repository=${IMAGE%:*}" --set "image.tag=${IMAGE##*:}"; } >>"$LAB/logs/setup.log" 2>&1 \
    || fail "helm install of charts/slurm-operator failed: $(tail -n 1 "$LAB/logs/setup.log")"
else
  log "starting the hook server on 127.0.0.1:$HOOKS_PORT (from the work tree)"
  (cd "$REPO" && HOOKS_BIND=127.0.0.1:$HOOKS_PORT exec setsid "$REPO/.venv/bin/gunicorn" -c hooks/gunicorn_conf.py \
     'hooks.app:create_app()' </dev/null >>"$LAB/logs/hooks.log" 2>&1) &
  record_pid hooks $!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$HOOKS_PORT/readyz" >/dev/null && break; sleep 0.2; done
  curl -sf "http://127.0.0.1:$HOOKS_PORT/readyz" >/dev/null || fail "the hook server did not answer /readyz; see $LAB/logs/hooks.log"
  SETUP_ARGS=(--hooks-url "http://127.0.0.1:$HOOKS_PORT")
fi

log "applying the cluster's resources${SETUP_ARGS[*]:+ (and the CRDs and CompositeControllers from the work tree)}"
PYTHONPATH=$REPO:$REPO/hack/cluster "$PY" -m lab setup --kubeconfig "$KUBECONFIG" "${SETUP_ARGS[@]}" --lab-dir "$LAB" \
  --cluster "$CLUSTER" >>"$LAB/logs/setup.log" 2>&1 \
  || fail "applying the cluster's resources failed: $(tail -n 1 "$LAB/logs/setup.log")"
if [ "$CLUSTER" = chart ]; then
  # docs/getting-started.md, step 5, with the lab's values (the cluster examples/crs/ describes)
  log "installing the cluster: helm install slurm charts/slurm -n slurm -f hack/cluster/slurm-values.yaml"
  "$HELM" install slurm "$REPO/charts/slurm" -n slurm -f "$CLUSTER_HACK_DIR/slurm-values.yaml" \
    --set-file "loginsets.slinky.rootSshAuthorizedKeys=$LAB/ssh/id_ed25519.pub" >>"$LAB/logs/setup.log" 2>&1 \
    || fail "helm install of charts/slurm failed: $(tail -n 1 "$LAB/logs/setup.log")"
fi

log "starting the stand-ins (${METACONTROLLER:+real Metacontroller, }$NODES lab nodes)"
(cd "$REPO" && PYTHONPATH=$REPO:$REPO/hack/cluster exec setsid "$PY" -m lab run --kubeconfig "$KUBECONFIG" \
   --lab-dir "$LAB" --rootfs "$ROOTFS" --nodes "$NODES" ${METACONTROLLER:+--no-driver} "${IMAGE_ARGS[@]}" \
   </dev/null >>"$LAB/logs/lab.log" 2>&1) &
record_pid lab $!
if [ -n "$METACONTROLLER" ]; then
  (exec setsid "$METACONTROLLER" --kubeconfig="$KUBECONFIG" --health-probe-bind-address=127.0.0.1:18082 \
     --metrics-address=127.0.0.1:18083 </dev/null >>"$LAB/logs/metacontroller.log" 2>&1) &
  record_pid metacontroller $!
fi
for _ in $(seq 50); do [ -s "$LAB/resolv.conf" ] && break; sleep 0.2; done
[ -s "$LAB/resolv.conf" ] || fail "the node agent wrote no $LAB/resolv.conf (its DNS did not start); see $LAB/logs/lab.log"

if [ "$OPERATOR" = worktree ]; then
log "starting slurm_sync (operator, two replicas under leader election, from the work tree)"
# As a Deployment of two would run it: each replica restarted when its process ends, the Lease deciding
# which one writes; names resolve through the lab's DNS as in a pod (hack/cluster/replica.sh, in a mount
# namespace of its own).
for replica in "slurm-sync $SYNC_PORT" "slurm-sync-b $SYNC_PORT_B"; do
  # shellcheck disable=SC2086 # two words: the replica's name and port
  set -- $replica
  (cd "$REPO" && HOSTNAME=$1 exec setsid unshare --mount --propagation private -- /bin/sh \
     "$CLUSTER_HACK_DIR/replica.sh" "$LAB/resolv.conf" "$PY" -m slurm_sync --kubeconfig "$KUBECONFIG" \
     --mode operator --bind "127.0.0.1:$2" --lease-namespace slurm --log-format text \
     </dev/null >>"$LAB/logs/$1.log" 2>&1) &
  record_pid "$1" $!
done
fi

log "waiting for every custom resource to be Ready (up to $TIMEOUT s)"
kinds="controllers nodesets restapis accountings loginsets tokens"
deadline=$((SECONDS + TIMEOUT))
for kind in $kinds; do
  left=$((deadline - SECONDS))
  [ "$left" -gt 0 ] || left=1
  "$KUBECTL" wait -n slurm --for=condition=Ready "$kind" --all --timeout="${left}s" >>"$LAB/logs/wait.log" 2>&1 \
    || fail "$kind not Ready within $TIMEOUT s: $("$KUBECTL" get -n slurm "$kind" -o jsonpath='{range .items[*]}{.metadata.name}: {range .status.conditions[?(@.type=="Ready")]}{.reason} {.message}{end}; {end}' 2>&1 | head -c 600)"
done
{
  echo "# written by hack/cluster/up.sh; the lab runs until hack/cluster/down.sh. Source it: . .cluster-lab/env"
  echo "export KUBECONFIG='$KUBECONFIG'"
  echo "export CLUSTER_LAB_DIR='$LAB'"
  echo "export CLUSTER_LAB_OPERATOR='$OPERATOR'"
  echo "export CLUSTER_LAB_CLUSTER='$CLUSTER'"
  if [ "$OPERATOR" = worktree ]; then
    echo "export CLUSTER_LAB_HOOKS_URL='http://127.0.0.1:$HOOKS_PORT'"
    echo "export CLUSTER_LAB_SYNC_REPLICAS='slurm-sync=http://127.0.0.1:$SYNC_PORT slurm-sync-b=http://127.0.0.1:$SYNC_PORT_B'"
  else
    echo "export CLUSTER_LAB_IMAGE='$IMAGE'"
    # the chart's slurm_sync pods: namespace, label selector, port of /readyz (tests/cluster/plugin.py finds them)
    echo "export CLUSTER_LAB_SYNC_PODS='$OPERATOR_NAMESPACE app.kubernetes.io/name=slurm-operator-slurm-sync,app.kubernetes.io/instance=slurm-operator 8081'"
  fi
  echo "export CLUSTER_LAB_ROOTFS='$ROOTFS'"
  echo "export CLUSTER_LAB_METACONTROLLER='${METACONTROLLER:-stand-in}'"
  echo "export CLUSTER_LAB_UP_SECONDS='$((SECONDS - t0))'"
} >"$ENV_FILE"
log "up in $((SECONDS - t0)) s: every custom resource Ready; env in $ENV_FILE"
