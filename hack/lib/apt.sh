# shellcheck shell=bash
# apt_install LOG PACKAGE...: install host packages a lab or build needs from Debian (this host's own apt
# configuration), updating the package lists once when the first try fails; sourced, never run. Waits for
# another apt's lock, keeps the packages' own services from starting on the host (policy-rc.d, only while it
# runs and only when the host has none), writes apt's output to LOG. Exit status non-zero when apt-get
# failed; the caller names it in its one line.
apt_install() {
  local log=$1 own_policy=0 rc=0
  shift
  [ "$EUID" = 0 ] && command -v apt-get >/dev/null || { echo "apt_install: needs root and apt-get" >"$log"; return 1; }
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
  fi
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 "$@" \
    || { apt-get -o Acquire::Check-Valid-Until=false -o DPkg::Lock::Timeout=300 update -q \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 "$@"; }
  } >"$log" 2>&1 || rc=$?
  [ "$own_policy" = 0 ] || rm -f /usr/sbin/policy-rc.d
  return "$rc"
}
