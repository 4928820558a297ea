#!/bin/bash
# rootfs.sh - build (once) the cluster lab's root filesystem: Debian sid with every daemon Slinky's
# images run (slurmctld, slurmd, slurmrestd, slurmdbd, sackd, sshd), MariaDB and Python (the generic images a
# user's pod names: hack/cluster/lab/images.py), cached outside the
# repository at $CLUSTER_LAB_ROOTFS (default /var/cache/slinky-mc/cluster-sid). Every container of the
# lab runs from an overlay over it, so it is never written to once built.
#
# As in Slinky's images, the Slurm user is slurm with uid and gid 401 (the pods' runAsUser).
# Exit 0 when the cached rootfs is current; on failure, one line on stderr and exit 1.
set -Eeuo pipefail
# shellcheck source=../lib/mirror.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/../lib" && pwd)/mirror.sh"
# shellcheck source=../lib/apt.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")/../lib" && pwd)/apt.sh"
ROOTFS=${CLUSTER_LAB_ROOTFS:-/var/cache/slinky-mc/cluster-sid}
MIRROR=${CLUSTER_LAB_MIRROR:-}
SUITE=sid
PACKAGES="slurmctld slurmd slurmrestd slurmdbd sackd slurm-client slurm-wlm-jwt-plugin slurm-wlm-mysql-plugin
  mariadb-server mariadb-client openssh-server openssh-client tini procps curl iproute2 gawk python3 python-is-python3"
PACKAGES=$(echo $PACKAGES)
STAMP="format=1 suite=$SUITE packages=$PACKAGES"   # a change here rebuilds
SLURM_UID=401

log() { echo "[cluster-lab rootfs] $*" >&2; }
fail() { log "ERROR: $*"; exit 1; }
[ "$(cat "$ROOTFS/etc/slinky-cluster-lab" 2>/dev/null)" = "$STAMP" ] && exit 0
[ "$(id -u)" = 0 ] || fail "building $ROOTFS needs root (mmdebstrap)"
if ! command -v mmdebstrap >/dev/null; then
  log "installing mmdebstrap on the host"
  mkdir -p "$(dirname "$ROOTFS")"
  apt_install "$ROOTFS.apt.log" mmdebstrap || fail "apt-get could not install mmdebstrap; see $ROOTFS.apt.log"
fi
[ -n "$MIRROR" ] || MIRROR=$(debian_mirror)
[ -n "$MIRROR" ] || fail "no Debian mirror found in this host's apt configuration; set CLUSTER_LAB_MIRROR to a Debian mirror's URL"
mkdir -p "$(dirname "$ROOTFS")"
exec 9>"$ROOTFS.lock"
flock -w 1800 9 || fail "timed out waiting for $ROOTFS.lock"
[ "$(cat "$ROOTFS/etc/slinky-cluster-lab" 2>/dev/null)" = "$STAMP" ] && exit 0
build=$ROOTFS.build.$$
trap 'rm -rf --one-file-system "$build" 2>/dev/null || true' EXIT
log "building Debian $SUITE with the Slurm daemons, sshd and MariaDB from $MIRROR (a few minutes, once)"
# policy-rc.d first: no package may start a service while the rootfs is built
if ! timeout 1800 mmdebstrap --variant=apt \
    --aptopt='APT::Install-Recommends "false"' --aptopt='Acquire::Check-Valid-Until "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --setup-hook='mkdir -p "$1/usr/sbin" && printf "#!/bin/sh\nexit 101\n" >"$1/usr/sbin/policy-rc.d" && chmod 755 "$1/usr/sbin/policy-rc.d"' \
    --include="${PACKAGES// /,}" "$SUITE" "$build" "$MIRROR" >"$build.log" 2>&1; then
  fail "mmdebstrap failed ($(grep -m1 -E '^E: ' "$build.log" || echo 'no error line')); log: $build.log"
fi
old_uid=$(chroot "$build" id -u slurm)
old_gid=$(chroot "$build" id -g slurm)
chroot "$build" groupmod -g "$SLURM_UID" slurm
chroot "$build" usermod -u "$SLURM_UID" -g "$SLURM_UID" slurm
find "$build" -xdev \( -uid "$old_uid" -o -gid "$old_gid" \) -print0 \
  | xargs -0r chown -h --from="$old_uid:$old_gid" "$SLURM_UID:$SLURM_UID"
rm -f "$build"/etc/ssh/ssh_host_*   # each login pod makes its own, as the image does
echo "$STAMP" >"$build/etc/slinky-cluster-lab"
[ ! -e "$ROOTFS" ] || rm -rf --one-file-system "$ROOTFS"
mv -T "$build" "$ROOTFS"
rm -f "$build.log"
log "ready: $ROOTFS ($(du -sh "$ROOTFS" | cut -f1))"
