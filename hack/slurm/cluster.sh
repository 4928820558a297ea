#!/bin/bash
# Runs INSIDE the lab chroot (up.sh copies it to /opt/slinky-lab/ and starts it with
# `env -i`). Writes a fresh config, starts munged, slurmctld, four slurmd and
# slurmrestd, waits until they serve, and leaves its results in $DIR/result.env.
# Settings come from LAB_* variables (never SLURM_*: daemons would read those).
# On failure it writes one line to $DIR/error and exits non-zero; up.sh cleans up.
set -euo pipefail

DIR=${LAB_DIR:?}
CTLD_PORT=${LAB_CTLD_PORT:?}
REST_PORT=${LAB_REST_PORT:?}
SLURMD_PORT=${LAB_SLURMD_PORT:?}       # n1 listens here, n2 on the next port, ...
CPUS=${LAB_CPUS:-4}                    # fake; SlurmdParameters=config_overrides allows it
MEM_MB=${LAB_MEM_MB:-4000}
TIMEOUT=${LAB_TIMEOUT:-60}
TOKEN_USER=${LAB_TOKEN_USER:-root}
TOKEN_LIFESPAN=${LAB_TOKEN_LIFESPAN:-2592000}
REST_ACCOUNT=slurmrest                 # slurmrestd refuses root and SlurmUser
NODES="n1 n2 n3 n4"
REST_URL=http://127.0.0.1:$REST_PORT
export SLURM_CONF=$DIR/etc/slurm.conf

deadline=$(( $(date +%s) + TIMEOUT ))
die() { echo "$*" >"$DIR/error"; echo "[cluster] ERROR: $*" >&2; exit 1; }
say() { echo "[cluster] $*" >&2; }

# wait_until WHAT CMD... : poll every 0.1 s until CMD succeeds or the deadline passes
wait_until() {
  local what=$1; shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    check_daemons_alive || die "$DEAD died while waiting for $what; see $DIR/log/"
    sleep 0.1
  done
  say "$what: ready"
}
# Fake GPUs, typed by the DRA device classes the bridge translates, one vendor per node as on real
# machines: "TYPE COUNT" of a node.
gpus_of() { case $1 in n1 | n2) echo "gpu.nvidia.com 4" ;; *) echo "gpu.example.com 2" ;; esac; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start_daemon NAME CMD... : detached (own session, no inherited fds, cwd = $DIR),
# PID and start time recorded for down.sh
STARTED=""
start_daemon() {
  local name=$1; shift
  ( cd "$DIR" && exec setsid "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 ) &
  local pid=$!
  echo "$pid $(awk '{print $22}' "/proc/$pid/stat" 2>/dev/null || echo 0)" >"$DIR/pids/$name"
  STARTED="$STARTED $name"
}
DEAD=""
check_daemons_alive() {
  local n pid
  for n in $STARTED; do
    read -r pid _ <"$DIR/pids/$n"
    if [ ! -d "/proc/$pid" ] || grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null; then
      DEAD=$n; return 1
    fi
  done
}

# --- fresh runtime state (the whole dir is ours; up.sh stopped any old daemons)
rm -rf "$DIR"
mkdir -p "$DIR"/{etc,state,spool,log,pids,run,munge,keys/munge,keys/jwt,dev}
chmod 755 "$DIR" "$DIR"/{etc,spool,log,pids,run,munge,keys}
chown slurm:slurm "$DIR/state" "$DIR/run" "$DIR/keys/jwt"
# log dir stays root's; each unprivileged daemon gets its own pre-created file
: >"$DIR/log/munged.log"; chown munge:munge "$DIR/log/munged.log"
: >"$DIR/log/slurmctld.log"; chown slurm:slurm "$DIR/log/slurmctld.log"
chown munge:munge "$DIR/munge" "$DIR/keys/munge"
chmod 700 "$DIR/keys/munge" "$DIR/keys/jwt"
head -c 1024 /dev/urandom >"$DIR/keys/munge/munge.key"
chown munge:munge "$DIR/keys/munge/munge.key"; chmod 400 "$DIR/keys/munge/munge.key"
head -c 32 /dev/urandom >"$DIR/keys/jwt/jwt_hs256.key"
chown slurm:slurm "$DIR/keys/jwt/jwt_hs256.key"; chmod 600 "$DIR/keys/jwt/jwt_hs256.key"
MUNGE_SOCKET=$DIR/munge/munge.socket

# Ports in use by someone else would give confusing daemon errors later.
for p in "$CTLD_PORT" "$REST_PORT" $(for i in 0 1 2 3; do echo $((SLURMD_PORT + i)); done); do
  if port_busy "$p"; then die "port 127.0.0.1:$p is already in use; pick other ports with SLURM_LAB_CTLD_PORT, SLURM_LAB_REST_PORT, SLURM_LAB_SLURMD_PORT"; fi
done

SLURM_VERSION=$(slurmctld -V | awk '{print $2}')
PLUGIN_DIR=$(dirname "$(ls /usr/lib/*/slurm-wlm/auth_munge.so | head -1)")
# newest REST data parser this build ships (v0.0.45 on 26.05)
API_VERSION=$(ls "$PLUGIN_DIR"/data_parser_v0_0_*.so | sed -E 's/.*data_parser_(v[0-9_]+)\.so/\1/; s/_/./g' | sort -V | tail -1)
[ -n "$API_VERSION" ] || die "no data_parser plugin in $PLUGIN_DIR: is this Slurm >= 23.11?"
say "slurm $SLURM_VERSION, newest REST data parser $API_VERSION"

# --- config
{
  cat <<EOF
# written by hack/slurm/cluster.sh; regenerated on every start
ClusterName=lab
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$DIR/keys/jwt/jwt_hs256.key
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# without a default every job takes the whole node's memory
DefMemPerCPU=256
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=300
KillWait=5
MinJobAge=300
# room for dynamic nodes (POST /new/node, the bridge's external nodes): 4 static + 12 dynamic
MaxNodeCount=16
GresTypes=gpu
EOF
  i=0
  for n in $NODES; do
    read -r type count <<<"$(gpus_of "$n")"
    echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((SLURMD_PORT + i)) CPUs=$CPUS RealMemory=$MEM_MB Features=$n Gres=gpu:$type:$count State=UNKNOWN"
    i=$((i + 1))
  done
  echo "PartitionName=debug Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP"
} >"$DIR/etc/slurm.conf"
# Each fake GPU is a character device that behaves as /dev/null, so Slurm tracks every GPU by its
# index (IDX in `scontrol show job -d`, "index" in GET resources/<job>).
for i in 0 1 2 3; do mknod -m 666 "$DIR/dev/gpu$i" c 1 3; done
{
  echo "AutoDetect=off"
  for n in $NODES; do
    read -r type count <<<"$(gpus_of "$n")"
    echo "NodeName=$n Name=gpu Type=$type File=$DIR/dev/gpu[0-$((count - 1))]"
  done
} >"$DIR/etc/gres.conf"
# no cgroup fs in the chroot: slurmd dies at start-up unless cgroups are off
echo "CgroupPlugin=disabled" >"$DIR/etc/cgroup.conf"
chmod 644 "$DIR/etc/slurm.conf" "$DIR/etc/cgroup.conf" "$DIR/etc/gres.conf"

# --- daemons
start_daemon munged setpriv --reuid=munge --regid=munge --init-groups \
  munged -F --key-file="$DIR/keys/munge/munge.key" --socket="$MUNGE_SOCKET" \
  --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
wait_until munged bash -c "munge -S '$MUNGE_SOCKET' -n | unmunge -S '$MUNGE_SOCKET'" \
  || die "munged did not answer within ${TIMEOUT}s; see $DIR/log/munged.log"

start_daemon slurmctld slurmctld -D -f "$SLURM_CONF"
wait_until slurmctld bash -c "scontrol ping | grep -q 'is UP'" \
  || die "slurmctld did not answer within ${TIMEOUT}s; see $DIR/log/slurmctld.log"

for n in $NODES; do
  start_daemon "slurmd-$n" slurmd -D -N "$n" -f "$SLURM_CONF"
done

TOKEN=$(scontrol token username="$TOKEN_USER" lifespan="$TOKEN_LIFESPAN" | sed -n 's/^SLURM_JWT=//p')
[ -n "$TOKEN" ] || die "scontrol token username=$TOKEN_USER failed; see $DIR/log/slurmctld.log"

# SLURM_JWT=daemon is what makes slurmrestd accept client tokens (401 for all without it).
# No slurmdbd here, so only the slurmctld endpoints are loaded.
start_daemon slurmrestd env SLURM_JWT=daemon setpriv --reuid="$REST_ACCOUNT" --regid="$REST_ACCOUNT" \
  --clear-groups slurmrestd -f "$SLURM_CONF" -a rest_auth/jwt -s openapi/slurmctld "127.0.0.1:$REST_PORT"

all_nodes_idle() {
  local out; out=$(sinfo -h -N -o '%N %t') || return 1
  [ "$(awk '$2 == "idle"' <<<"$out" | sort -u | wc -l)" = 4 ]
}
# ping answers 200 even when slurmctld rejects the token: also require "responding": true
rest_ping() {
  local body
  body=$(curl -sf --max-time 5 -H "X-SLURM-USER-NAME: $TOKEN_USER" -H "X-SLURM-USER-TOKEN: $TOKEN" \
         "$REST_URL/slurm/$API_VERSION/ping") || return 1
  [[ $body =~ \"responding\":[[:space:]]*true ]]
}
wait_until "nodes n1-n4 idle" all_nodes_idle \
  || die "nodes not all idle after ${TIMEOUT}s ($(sinfo -h -N -o '%N=%t' 2>&1 | tr '\n' ' ')); see $DIR/log/slurmd-n*.log"
wait_until "slurmrestd $REST_URL" rest_ping \
  || die "slurmrestd ping on $REST_URL/slurm/$API_VERSION/ping not 200 after ${TIMEOUT}s; see $DIR/log/slurmrestd.out"
check_daemons_alive || die "$DEAD died during start-up; see $DIR/log/"

cat >"$DIR/result.env.tmp" <<EOF
SLURM_VERSION=$SLURM_VERSION
SLURM_REST_API_VERSION=$API_VERSION
SLURM_REST_USER=$TOKEN_USER
SLURM_REST_TOKEN=$TOKEN
EOF
chmod 600 "$DIR/result.env.tmp"
mv "$DIR/result.env.tmp" "$DIR/result.env"
say "up"
