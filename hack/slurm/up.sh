#!/bin/bash
# up.sh - start a real Slurm (Debian sid, 26.05) on loopback for the test suite.
#
# Builds a Debian sid root filesystem once with mmdebstrap and caches it outside the
# repo ($SLURM_LAB_ROOTFS, default /var/cache/slinky-mc/slurm-sid), then runs
# slurmctld, four slurmd (n1..n4) and slurmrestd (JWT) inside it with chroot. The
# chroot shares the host's network and PIDs: the host reaches slurmrestd on 127.0.0.1.
#
# Writes .slurm-lab/env (sourceable: SLURM_REST_URL, SLURM_REST_TOKEN, SLURM_JWT_KEY_FILE,
# SLURM_VERSION, SLURM_LAB_ROOT, ...). On failure: exit 1 and one line in .slurm-lab/error.
# Running it again while the lab is up does nothing. Stop with down.sh.
#
# Settings (environment):
#   SLURM_LAB_ROOTFS          rootfs cache dir            /var/cache/slinky-mc/slurm-sid
#   SLURM_LAB_MIRROR          Debian mirror               first Debian mirror in host apt sources
#   SLURM_LAB_CTLD_PORT       slurmctld                   16817
#   SLURM_LAB_REST_PORT       slurmrestd                  16820
#   SLURM_LAB_SLURMD_PORT     slurmd n1 (n2..n4 follow)   16831
#   SLURM_LAB_TIMEOUT         seconds to become ready     60
#   SLURM_LAB_TOKEN_LIFESPAN  admin token lifetime (s)    2592000 (30 days)
#   SLURM_LAB_CPUS            CPUs per node (fake)        4
#   SLURM_LAB_MEM_MB          RealMemory per node (fake)  4000
set -Eeuo pipefail   # -E: the ERR trap below also sees failures inside functions
HACK_ROLE=up   # lib.sh: use $SLURM_LAB_ROOTFS or the default, not this checkout's last rootfs
# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
# shellcheck source=../lib/mirror.sh
. "$REPO/hack/lib/mirror.sh"
# shellcheck source=../lib/apt.sh
. "$REPO/hack/lib/apt.sh"
LOG_TAG=up

CTLD_PORT=${SLURM_LAB_CTLD_PORT:-16817}
REST_PORT=${SLURM_LAB_REST_PORT:-16820}
SLURMD_PORT=${SLURM_LAB_SLURMD_PORT:-16831}
TIMEOUT=${SLURM_LAB_TIMEOUT:-60}
TOKEN_LIFESPAN=${SLURM_LAB_TOKEN_LIFESPAN:-2592000}
CPUS=${SLURM_LAB_CPUS:-4}
MEM_MB=${SLURM_LAB_MEM_MB:-4000}
MIRROR=${SLURM_LAB_MIRROR:-}
scrub_slurm_env

SUITE=sid
PACKAGES="slurmctld slurmd slurmrestd slurm-client slurm-wlm-jwt-plugin munge procps curl"
STAMP="format=1 suite=$SUITE packages=$PACKAGES"   # a change here forces a rebuild
REST_URL=http://127.0.0.1:$REST_PORT
# A change restarts the lab, and so does a change of the config cluster.sh writes.
SETTINGS="ctld=$CTLD_PORT rest=$REST_PORT slurmd=$SLURMD_PORT cpus=$CPUS mem=$MEM_MB config=$(sha256sum "$SLURM_HACK_DIR/cluster.sh" | cut -c1-12)"

mkdir -p "$LAB" 2>/dev/null || true   # may fail for non-root; the root check below says why
LOG_FILE=$LAB/up.log
echo "=== up.sh $(date -u +%FT%TZ) rootfs=$ROOTFS" 2>/dev/null >>"$LOG_FILE" || true
rm -f "$ERROR_FILE" 2>/dev/null || true

STARTED=0
BUILD_DIR=""
ERR_AT=""
fail() {
  { echo "$*" >"$ERROR_FILE"; } 2>/dev/null || true
  log "ERROR: $*"
  exit 1
}
on_exit() {
  local rc=$?
  [ "$rc" = 0 ] && return 0
  if [ ! -s "$ERROR_FILE" ]; then
    { echo "hack/slurm/up.sh failed (exit $rc) at ${ERR_AT:-an unknown step}; see $LOG_FILE" >"$ERROR_FILE"; } 2>/dev/null || true
  fi
  if [ "$STARTED" = 1 ]; then  # leave no half-started daemons behind; logs stay
    log "stopping what was started (logs stay in $LAB/logs/)"
    stop_lab || true
    unmount_chroot || true
  fi
  if [ -n "$BUILD_DIR" ] && [ -d "$BUILD_DIR" ] && [ -z "$(mounts_under "$BUILD_DIR")" ]; then
    rm -rf --one-file-system "$BUILD_DIR"
  fi
  rm -f "$ENV_FILE" 2>/dev/null || true
}
trap 'ERR_AT="line $LINENO: $BASH_COMMAND"' ERR
trap on_exit EXIT

[ "$(id -u)" = 0 ] || fail "hack/slurm/up.sh must run as root (it builds a chroot, mounts /proc and /dev, starts daemons): run 'sudo make slurm-up'"
for setting in CTLD_PORT REST_PORT SLURMD_PORT TIMEOUT TOKEN_LIFESPAN CPUS MEM_MB; do
  [[ ${!setting} =~ ^[1-9][0-9]*$ ]] || fail "SLURM_LAB_$setting must be a positive integer, not '${!setting}'"
done
for tool in chroot mount umount mountpoint findmnt flock setsid timeout; do
  command -v "$tool" >/dev/null || fail "$tool is missing on this host (util-linux/coreutils); install it and retry"
done

# One up/down/build at a time per rootfs.
mkdir -p "$(dirname "$ROOTFS")"
exec 9>"$ROOTFS.lock"
flock -w 1200 9 || fail "timed out waiting for the lock $ROOTFS.lock (another up.sh/down.sh is running)"

rest_ping() {  # rest_ping TOKEN API_VERSION; a 200 alone does not prove the token works
  local body
  body=$(in_chroot -t 10 curl -sf --max-time 5 -H "X-SLURM-USER-TOKEN: $1" "$REST_URL/slurm/$2/ping" 2>/dev/null) \
    || return 1
  [[ $body =~ \"responding\":[[:space:]]*true ]]
}
result() { sed -n "s/^$1=//p" "$RUN/result.env" 2>/dev/null; }
same_settings() {  # (labs started before LAB_SETTINGS existed recorded only the URL)
  local recorded; recorded=$(result LAB_SETTINGS)
  if [ -n "$recorded" ]; then [ "$recorded" = "$SETTINGS" ]; else [ "$(result SLURM_REST_URL)" = "$REST_URL" ]; fi
}

write_env_file() {
  local tmp=$ENV_FILE.tmp v
  {
    echo "# written by hack/slurm/up.sh; the lab runs until hack/slurm/down.sh. Source it: . .slurm-lab/env"
    echo "# (paths under SLURM_LAB_DIR are inside the chroot; prefix them with SLURM_LAB_ROOT on the host)"
    for v in \
      "SLURM_REST_URL=$REST_URL" \
      "SLURM_REST_API_VERSION=$(result SLURM_REST_API_VERSION)" \
      "SLURM_REST_USER=$(result SLURM_REST_USER)" \
      "SLURM_REST_TOKEN=$(result SLURM_REST_TOKEN)" \
      "SLURM_JWT_KEY_FILE=$RUN/keys/jwt/jwt_hs256.key" \
      "SLURM_VERSION=$(result SLURM_VERSION)" \
      "SLURM_LAB_ROOT=$ROOTFS" \
      "SLURM_LAB_DIR=$INNER_DIR" \
      "SLURM_LAB_LOG_DIR=$RUN/log" \
      "SLURM_LAB_NODES=n1 n2 n3 n4" \
      "SLURM_LAB_PARTITION=debug" \
      "SLURM_LAB_CTLD_PORT=$CTLD_PORT" \
      "SLURM_LAB_REST_PORT=$REST_PORT" \
      "SLURM_LAB_SLURMD_PORT=$SLURMD_PORT" \
      "SLURM_LAB_CPUS=$CPUS" \
      "SLURM_LAB_MEM_MB=$MEM_MB"; do
      case $v in *\'*) fail "refusing to write a quote into $ENV_FILE: $v" ;; esac
      echo "export ${v%%=*}='${v#*=}'"
    done
  } >"$tmp"
  chmod 600 "$tmp"
  mv -f "$tmp" "$ENV_FILE"
}

# ---------------------------------------------------------------- already up?
if [ -n "$RECORDED_ROOTFS" ] && [ "$RECORDED_ROOTFS" != "$ROOTFS" ] \
   && (set_rootfs "$RECORDED_ROOTFS" && all_daemons_live); then
  fail "this checkout's lab is still running in $RECORDED_ROOTFS; stop it with hack/slurm/down.sh before using $ROOTFS"
fi
owner=$(cat "$RUN/owner" 2>/dev/null || true)
if all_daemons_live; then
  if [ -n "$owner" ] && [ "$owner" != "$REPO" ]; then
    # One rootfs serves one lab; a lab left behind by another checkout (an earlier
    # session, a CI clone) must not block this one.
    log "taking over: stopping the lab that $owner started in $ROOTFS"
  fi
  tok=$(result SLURM_REST_TOKEN)
  if [ "$owner" = "$REPO" ] && same_settings && [ -n "$tok" ] \
     && rest_ping "$tok" "$(result SLURM_REST_API_VERSION)"; then
    [ -s "$ENV_FILE" ] || write_env_file
    log "already up: $REST_URL (Slurm $(result SLURM_VERSION)); nothing to do"
    exit 0
  fi
fi
if any_pidfile; then
  log "restarting the lab in $RUN (not fully alive, not answering, or started with other settings)"
  stop_lab
fi

# ---------------------------------------------------------------- rootfs (cached)
# (slurmctld is an absolute symlink into /etc/alternatives: resolve it inside the chroot)
rootfs_ok() {
  [ "$(cat "$ROOTFS/etc/slinky-lab-rootfs" 2>/dev/null)" = "$STAMP" ] && chroot "$ROOTFS" test -x /usr/sbin/slurmctld
}

build_rootfs() {
  local build=$ROOTFS.build.$$ old=$ROOTFS.old.$$ d reason
  BUILD_DIR=$build   # on_exit removes it if we fail before the swap
  (. /etc/os-release && [ "${ID:-}" = debian ]) \
    || fail "this host is not Debian ($(. /etc/os-release && echo "${PRETTY_NAME:-unknown}")): the lab rootfs is built with mmdebstrap from Debian's archive; run on Debian or provide a built rootfs via SLURM_LAB_ROOTFS"
  if ! command -v mmdebstrap >/dev/null; then
    log "installing mmdebstrap on the host"
    apt_install "$LAB/apt.log" mmdebstrap || fail "apt-get could not install mmdebstrap; see $LAB/apt.log"
  fi
  [ -n "$MIRROR" ] || MIRROR=$(debian_mirror)
  [ -n "$MIRROR" ] || fail "no Debian mirror found in this host's apt configuration; set SLURM_LAB_MIRROR to a Debian mirror's URL"

  # leftovers of an interrupted build (we hold the lock, so nobody is building)
  for d in "$ROOTFS".build.* "$ROOTFS".old.*; do
    [ -d "$d" ] || continue
    [ -z "$(mounts_under "$d")" ] || fail "$d has mounts left from an interrupted build; unmount them (findmnt | grep $d) and retry"
    rm -rf --one-file-system "$d"
  done

  log "building Debian $SUITE rootfs from $MIRROR (about 20-60 s; log: $LAB/build.log)"
  if ! timeout 1200 mmdebstrap --variant=apt \
      --aptopt='APT::Install-Recommends "false"' \
      --aptopt='Acquire::Check-Valid-Until "false"' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
      --include="${PACKAGES// /,}" "$SUITE" "$build" "$MIRROR" >"$LAB/build.log" 2>&1; then
    reason=$(grep -m1 -E '^E: ' "$LAB/build.log" || true)   # the first error is the cause
    [ -z "$(mounts_under "$build")" ] && rm -rf --one-file-system "$build"
    fail "mmdebstrap could not build Debian $SUITE from $MIRROR (${reason:-no error line}); full log: $LAB/build.log"
  fi
  # the chroot's own apt must never start services either
  printf '#!/bin/sh\nexit 101\n' >"$build/usr/sbin/policy-rc.d"
  chmod 755 "$build/usr/sbin/policy-rc.d" "$build"
  echo "$STAMP" >"$build/etc/slinky-lab-rootfs"
  # swap in atomically: a reader sees the old rootfs or the new one, never a partial one
  if [ -e "$ROOTFS" ]; then
    unmount_chroot
    [ -z "$(mounts_under "$ROOTFS")" ] || fail "cannot replace $ROOTFS: something is still mounted under it"
    mv -T "$ROOTFS" "$old"
  fi
  mv -T "$build" "$ROOTFS"
  BUILD_DIR=""
  [ ! -e "$old" ] || rm -rf --one-file-system "$old"
  log "rootfs ready: $ROOTFS ($(du -sh "$ROOTFS" | cut -f1), Slurm $(chroot "$ROOTFS" slurmctld -V | awk '{print $2}'))"
}
rootfs_ok || build_rootfs
echo "$ROOTFS" >"$LAB/rootfs"   # down.sh and exec.sh find the lab through this

# ---------------------------------------------------------------- prepare the chroot
cp /etc/hosts "$ROOTFS/etc/hosts"          # "localhost" must resolve inside
install -D -m 755 "$SLURM_HACK_DIR/cluster.sh" "$ROOTFS/opt/slinky-lab/cluster.sh"
chroot "$ROOTFS" getent passwd slurmrest >/dev/null \
  || chroot "$ROOTFS" useradd --system --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin --user-group slurmrest
STARTED=1
mounted "$ROOTFS/proc" || mount -t proc proc "$ROOTFS/proc" || fail "cannot mount proc on $ROOTFS/proc"
mounted "$ROOTFS/dev" || mount --bind /dev "$ROOTFS/dev" || fail "cannot bind-mount /dev on $ROOTFS/dev"
mkdir -p "$RUN"
ln -sfn "$RUN/log" "$LAB/logs"

# ---------------------------------------------------------------- start
log "starting slurmctld, slurmd n1-n4, slurmrestd (ports ctld $CTLD_PORT, rest $REST_PORT, slurmd $SLURMD_PORT-$((SLURMD_PORT + 3)))"
rm -f "$RUN/error"
set +e
# fd 9 (the lock) must not leak into the daemons
(cd / && exec chroot "$ROOTFS" /usr/bin/env -i PATH="$CHROOT_PATH" HOME=/root LANG=C.UTF-8 \
   LAB_DIR="$INNER_DIR" LAB_CTLD_PORT="$CTLD_PORT" LAB_REST_PORT="$REST_PORT" LAB_SLURMD_PORT="$SLURMD_PORT" \
   LAB_TIMEOUT="$TIMEOUT" LAB_TOKEN_LIFESPAN="$TOKEN_LIFESPAN" LAB_CPUS="$CPUS" LAB_MEM_MB="$MEM_MB" \
   /opt/slinky-lab/cluster.sh) 9>&- 2>&1 | tee -a "$LOG_FILE" >&2
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" != 0 ]; then
  fail "$(cat "$RUN/error" 2>/dev/null || echo "cluster.sh exited $rc") (logs: $LAB/logs/, $LOG_FILE)"
fi
echo "$REPO" >"$RUN/owner"
echo "LAB_SETTINGS=$SETTINGS" >>"$RUN/result.env"
write_env_file
log "up: $REST_URL, Slurm $(result SLURM_VERSION), REST $(result SLURM_REST_API_VERSION); env in $ENV_FILE"
