#!/usr/bin/env bash
# image-base.sh - the Dockerfile's base made on this machine, for where no registry serves the default one
# (python:3.11-slim-bookworm): Debian bookworm minbase from this host's own Debian mirror (hack/lib/mirror.sh) with
# python3 (3.11), what the official image adds to Debian (ca-certificates, netbase, tzdata) and a venv at /opt/venv
# first on PATH, so `python`, `pip` and console scripts resolve there and pip installs without PEP 668's refusal.
# Imported into ENGINE's storage as localhost/slinky-mc/python-base:3.11-bookworm-<hash of this file>; built once,
# then an image with that tag is reused (`buildah rmi <it>` makes the next run build it anew).
#   hack/image-base.sh [ENGINE]   (buildah, podman or docker; default buildah) prints the image's name on stdout
# hack/image.sh runs it when the Dockerfile's default base cannot be pulled. Needs root (mmdebstrap, which it
# installs with apt-get when missing); one to two minutes cold, well under a second warm.
set -euo pipefail
engine=${1:-buildah}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib/mirror.sh
. "$here/lib/mirror.sh"
# shellcheck source=hack/lib/apt.sh
. "$here/lib/apt.sh"
recipe=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)
image=localhost/slinky-mc/python-base:3.11-bookworm-$recipe
SUITE=bookworm
VENV=/opt/venv
PATH_IN_IMAGE=$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
log() { echo "image-base: $*" >&2; }
fail() { log "$*"; exit 1; }
case $engine in buildah | podman | docker) ;; *) fail "unknown engine $engine (buildah, podman or docker)" ;; esac

has_image() {
  case $engine in
    buildah) buildah inspect --type image "$1" ;;
    podman) podman image exists "$1" ;;
    docker) docker image inspect "$1" ;;
  esac >/dev/null 2>&1
}

if has_image "$image"; then echo "$image"; exit 0; fi
# one build at a time; whoever waited finds the image made
exec 9>"${TMPDIR:-/tmp}/slinky-mc-python-base.lock"
flock 9
if has_image "$image"; then echo "$image"; exit 0; fi

[ "$(id -u)" = 0 ] || fail "building $image needs root (mmdebstrap); run it once as root, or name a registry's copy of the base: BASE_IMAGE=<registry>/python:3.11-slim-bookworm"
if ! command -v mmdebstrap >/dev/null; then
  log "installing mmdebstrap with apt-get"
  apt_install /tmp/image-base-apt.log mmdebstrap || fail "apt-get could not install mmdebstrap; see /tmp/image-base-apt.log"
fi
mirror=${IMAGE_BASE_MIRROR:-$(debian_mirror)}
[ -n "$mirror" ] || fail "no Debian mirror in this host's apt configuration; set IMAGE_BASE_MIRROR to a Debian mirror's URL"
sources=("deb $mirror $SUITE main" "deb $mirror $SUITE-updates main")
# the security archive too when this host's apt has one for the suite (its address is the host's configuration)
security=$(apt_archive_for "$SUITE-security")
[ -z "$security" ] || sources+=("deb $security $SUITE-security main")

work=$(mktemp -d /var/tmp/slinky-mc-python-base.XXXXXX)
ctr=""
cleanup() {
  [ -z "$ctr" ] || buildah rm "$ctr" >/dev/null 2>&1 || true
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
t0=$SECONDS
log "building $image: Debian $SUITE minbase with python3 from $mirror (one to two minutes)"
# merged /usr by mmdebstrap's own hook, as Debian's images have it, not by the usrmerge package (and its perl)
if ! timeout 1200 mmdebstrap --variant=minbase --format=tar --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --aptopt='APT::Install-Recommends "false"' --aptopt='Acquire::Check-Valid-Until "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --include=python3,python3-venv,ca-certificates,netbase,tzdata \
    --customize-hook="chroot \"\$1\" python3 -m venv $VENV" \
    --customize-hook='rm -rf "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old "$1"/var/log/*' \
    "$SUITE" "$work/rootfs.tar" "${sources[@]}" >"$work/build.log" 2>&1; then
  reason=$(grep -m1 -E '^E: ' "$work/build.log" || tail -1 "$work/build.log")
  cp "$work/build.log" /tmp/image-base-build.log
  fail "mmdebstrap could not build Debian $SUITE from $mirror (${reason:-no error line}); full log: /tmp/image-base-build.log"
fi

# The official image's command and the environment it sets that a build relies on (PATH first: the venv).
case $engine in
  buildah)
    ctr=$(buildah from scratch)
    buildah add --quiet "$ctr" "$work/rootfs.tar" / >/dev/null
    buildah config --env "PATH=$PATH_IN_IMAGE" --env LANG=C.UTF-8 --cmd python3 \
      --label "org.opencontainers.image.description=python3.11 on Debian $SUITE minbase (hack/image-base.sh)" "$ctr"
    buildah commit --quiet --rm "$ctr" "$image" >/dev/null
    ctr=""
    ;;
  *)
    "$engine" import --change "ENV PATH=$PATH_IN_IMAGE" --change "ENV LANG=C.UTF-8" --change 'CMD ["python3"]' \
      "$work/rootfs.tar" "$image" >/dev/null
    ;;
esac
log "built $image with $engine in $((SECONDS - t0)) s"
echo "$image"
