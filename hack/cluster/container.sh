#!/bin/bash
# container.sh - runs as PID 1 of a new PID namespace, in new mount/UTS/IPC namespaces and the pod's
# network namespace (runtime.py starts it with nsenter + unshare), as root on the host's tools.
# Makes the container's root (an overlay over the lab rootfs), its volume mounts, /proc, /dev, the
# lab's /etc/hosts and the image entrypoints, then becomes the container's process: chroot into that
# root as the container's user. The environment it was started with is the container's own, untouched.
#
#   container.sh ROOTFS STATE HOSTNAME UID:GID GROUPS WORKDIR COMMAND [ARG...]
# STATE holds upper/, work/, root/ and mounts (NUL-separated triples: source, target, ro|rw).
set -eu
container_path=$PATH   # the container's own; the host's tools are called by their full path below
rootfs=$1 state=$2 host=$3 user=$4 groups=$5 workdir=$6
shift 6
root=$state/root
/usr/bin/hostname "$host"
mount() { /usr/bin/mount "$@"; }
mount -t overlay overlay -o "lowerdir=$rootfs,upperdir=$state/upper,workdir=$state/work" "$root"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
# in_root PATH: PATH as the container sees it, resolved on the host under $root: symlinks are followed inside the
# root (an absolute link restarts at the root, `..` stops there), as runc's securejoin does, so a mount target
# under a link (the image's /var/run -> /run) lands in the container and never on the host's own /run
in_root() {
  local rest=${1#/} done="" part link hops=0
  while [ -n "$rest" ]; do
    part=${rest%%/*}
    if [ "$part" = "$rest" ]; then rest=""; else rest=${rest#*/}; fi
    case $part in
      ""|.) continue ;;
      ..) done=${done%/*}; continue ;;
    esac
    if [ -L "$root$done/$part" ]; then
      hops=$((hops + 1)); [ "$hops" -le 40 ] || { echo "container.sh: too many links in $1" >&2; exit 1; }
      link=$(/usr/bin/readlink "$root$done/$part")
      case $link in /*) done="" ;; esac
      rest=${link#/}${rest:+/$rest}
    else
      done=$done/$part
    fi
  done
  printf '%s\n' "$root$done"
}
while IFS= read -r -d '' source && IFS= read -r -d '' target && IFS= read -r -d '' mode; do
  dest=$(in_root "$target")
  if [ -d "$source" ]; then /usr/bin/mkdir -p "$dest"; else /usr/bin/mkdir -p "${dest%/*}"; [ -e "$dest" ] || : >"$dest"; fi
  mount --bind "$source" "$dest"
  if [ "$mode" = ro ]; then mount -o remount,bind,ro "$dest"; fi
done <"$state/mounts"
cd /
PATH=$container_path exec /usr/sbin/chroot --userspec="$user" ${groups:+--groups="$groups"} "$root" /bin/sh -c 'cd "$0" || exit 127; exec "$@"' "$workdir" "$@"
