#!/usr/bin/env bash
# registry.sh - a local OCI registry for the tests of `make release` (tests/test_release.py): Debian's
# docker-registry (the CNCF distribution registry), installed with apt-get when missing (as root), serving
# plain HTTP on 127.0.0.1:PORT from DIR until it is stopped. Runs in the foreground.
#   hack/registry.sh DIR PORT
set -euo pipefail
dir=${1:?usage: hack/registry.sh DIR PORT} port=${2:?usage: hack/registry.sh DIR PORT}
# shellcheck source=lib/apt.sh
. "$(dirname "$0")/lib/apt.sh"
if ! command -v docker-registry >/dev/null; then
  [ "$EUID" = 0 ] && command -v apt-get >/dev/null \
    || { echo "registry: docker-registry is missing: apt-get install docker-registry" >&2; exit 1; }
  apt_install "$dir.apt.log" docker-registry \
    || { echo "registry: apt-get could not install docker-registry; see $dir.apt.log" >&2; exit 1; }
  # the package starts its own service on port 5000; this script runs its own registry only
  if command -v systemctl >/dev/null && systemctl is-active --quiet docker-registry 2>/dev/null; then
    systemctl disable --now docker-registry >/dev/null 2>&1 || true
  fi
fi
mkdir -p "$dir/data"
cat >"$dir/config.yml" <<CONFIG
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
CONFIG
exec docker-registry serve "$dir/config.yml"
