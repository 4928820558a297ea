#!/bin/bash
# exec.sh - run a command in a cluster lab pod's container, as `kubectl exec` would: its namespaces,
# its root filesystem, its user and its environment.
#   hack/cluster/exec.sh NAMESPACE POD [--container NAME] -- COMMAND [ARG...]
# Without --container: the pod's kubectl.kubernetes.io/default-container, else its first container.
set -euo pipefail
LAB=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.cluster-lab
usage() { echo "usage: $0 NAMESPACE POD [--container NAME] -- COMMAND [ARG...]" >&2; exit 2; }
[ $# -ge 4 ] || usage
ns=$1 pod=$2 container=""
shift 2
if [ "$1" = --container ] || [ "$1" = -c ]; then container=$2; shift 2; fi
[ "$1" = -- ] || usage
shift
pid=""
for f in "$LAB"/pods/*/pod; do   # an earlier pod of the same name may have left its directory
  [ -e "$f" ] && [ "$(cat "$f")" = "$ns/$pod" ] || continue
  dir=$(dirname "$f")
  name=${container:-$(cat "$dir/default-container")}
  outer=$(cat "$dir/containers/$name/pid" 2>/dev/null) || continue
  pid=$(awk '{print $1}' "/proc/$outer/task/$outer/children" 2>/dev/null || true)
  [ -z "$pid" ] || break
done
[ -n "$pid" ] || { echo "exec.sh: no running container ${container:-(default)} of pod $ns/$pod in the cluster lab" >&2; exit 1; }
uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
gid=$(awk '/^Gid:/ {print $2}' "/proc/$pid/status")
mapfile -d '' environ <"/proc/$pid/environ"
exec nsenter -t "$pid" -m -u -i -n -p -r -w -S "$uid" -G "$gid" /usr/bin/env -i "${environ[@]}" "$@"
