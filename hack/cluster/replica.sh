#!/bin/sh
# replica.sh RESOLV_CONF COMMAND... - one replica of a Deployment, as the kubelet runs its container: names
# resolve through the lab's cluster DNS, as RESOLV_CONF says (bind-mounted over /etc/resolv.conf; run it
# in a mount namespace of its own), and COMMAND is started again a second after it ends, however it
# ended. SIGTERM stops both.
resolv_conf=$1
shift
mount --bind "$resolv_conf" /etc/resolv.conf || exit 1
child=
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 0' TERM INT
while :; do
  "$@" &
  child=$!
  wait "$child"
  sleep 1
done
