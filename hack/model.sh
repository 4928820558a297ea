#!/bin/bash
# model.sh - check the drain protocol's model (model/drain.pml, docs/architecture.md §4) with spin.
#
# Installs spin (Debian's package) and a C compiler when missing, the way hack/slurm/up.sh installs
# mmdebstrap (hack/lib/apt.sh), then runs each scenario's safety check and liveness claims (tests/model/spin.py) and prints
# one line per run: errors, states explored, seconds, the bounds. Non-zero on any error or a cut search.
# PYTHON=/path/to/python picks the interpreter (default: the repository's .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/apt.sh
. hack/lib/apt.sh
PYTHON=${PYTHON:-.venv/bin/python}

install() {
  echo "model: installing $* with apt-get" >&2
  apt_install /tmp/model-apt.log "$@" || { echo "model: apt-get could not install $*; see /tmp/model-apt.log" >&2; exit 1; }
}

command -v spin >/dev/null || install spin
command -v cc >/dev/null || command -v gcc >/dev/null || install gcc
exec "$PYTHON" -m tests.model.spin
