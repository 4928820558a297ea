#!/bin/sh
# replica.sh HOSTS COMMAND... - one replica of a Deployment, as the kubelet runs its container: names
# resolve through the lab's HOSTS file (bind-mounted over /etc/hosts; run it in a mount namespace of its
# own), and COMMAND is started again a second after it ends, however it ended. SIGTERM stops both.
hosts=$1
shift
mount --bind "$hosts" /etc/hosts || exit 1
child=
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 0' TERM INT
while :; do
  "$@" &
  child=$!
  wait "$child"
  sleep 1
done
