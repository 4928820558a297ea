#!/bin/bash
# exec.sh - run a Slurm command inside the lab chroot, as root (a Slurm administrator),
# against the lab cluster. stdin, stdout, stderr and the exit code pass through.
#   hack/slurm/exec.sh scontrol update nodename=n2 state=drain reason=maint
#   hack/slurm/exec.sh sbatch --wrap 'sleep 60'
#   echo '#!/bin/sh' | hack/slurm/exec.sh sbatch
# The command starts in /tmp (inside the chroot) with a clean environment plus SLURM_CONF.
set -euo pipefail
# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
scrub_slurm_env   # the caller's SLURM_* (e.g. a sourced token) must not change our auth

[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "hack/slurm/exec.sh must run as root (it uses chroot)" >&2; exit 1; }
if [ ! -f "$RUN/etc/slurm.conf" ] || ! mounted "$ROOTFS/proc"; then
  echo "the Slurm lab is not up in $ROOTFS; run hack/slurm/up.sh" >&2
  exit 1
fi
cd /
exec chroot "$ROOTFS" /usr/bin/env -i -C /tmp PATH="$CHROOT_PATH" HOME=/root LANG=C.UTF-8 \
  SLURM_CONF="$INNER_DIR/etc/slurm.conf" "$@"
