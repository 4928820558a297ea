#!/bin/bash
# test.sh - `make test`: lint, the drain protocol's model, the image (hack/image.sh --ci), then the real
# Slurm and the real Kubernetes API server with every test that is not the cluster lab's, then the
# cluster lab's tests on the cluster lab (hack/cluster/test.sh). Each part's time is printed as it ends
# and all of them at the end, so a slow CI says where its time went. Non-zero when any part failed; a
# lab that cannot be built or started is reported in one line and its tests are skipped
# (hack/slurm/up.sh, hack/kube/up.sh, hack/cluster/up.sh).
#   hack/test.sh [PYTEST ARGS...]
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1
PY=$REPO/.venv/bin/python
parts=()
started=$SECONDS
part() {  # part NAME COMMAND...: run it, print and remember its time; its exit status is returned
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  echo "make test: $name: $((SECONDS - t0)) s$([ "$rc" = 0 ] || echo " (exit $rc)")" >&2
  parts+=("$name $((SECONDS - t0)) s")
  return "$rc"
}
lint() { .venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy; }

part lint lint || exit 1   # a finding fails the run before any lab starts
rc=0
part model hack/model.sh || rc=1
part image hack/image.sh --ci || rc=1   # tagged by its content: built only when that changed; tests/test_image.py runs it
slurm=0
part "Slurm lab start" hack/slurm/up.sh || slurm=$?
part "API server lab start" hack/kube/up.sh \
  || echo "make test: the Kubernetes API server lab did not start: $(cat .kube-lab/error 2>/dev/null); its tests are skipped" >&2
if [ "$slurm" -ne 0 ]; then
  echo "make test: the Slurm harness did not start (exit $slurm); running the suite anyway so the Slurm tests say why" >&2
  rc=1
fi
# The tests `make unit` runs (no lab, no gunicorn, no model checker) on every core; then the rest, one at a
# time, against the labs. Together: every test not the cluster lab's. Exit 5 is "none selected" (PYTEST_ARGS).
UNIT="not slurm and not kube and not cluster and not gunicorn and not model"
pytest_part() { "$PY" -m pytest "$@" || [ $? = 5 ]; }
part "unit tests (every core)" pytest_part -m "$UNIT" -n auto --timeout=120 -q "$@" || rc=1
part "suite (Slurm and API server labs, gunicorn, model)" pytest_part -m "not cluster and not ($UNIT)" \
  --durations=15 "$@" || rc=1
hack/kube/down.sh || true
hack/slurm/down.sh || true
part "cluster lab" hack/cluster/test.sh "$@" || rc=1
total=$((SECONDS - started))
(IFS=,; echo "make test: parts: ${parts[*]}; total $total s ($((total / 60)) min)" | sed 's/,/, /g') >&2
exit "$rc"
