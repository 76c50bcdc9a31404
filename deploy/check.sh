#!/bin/bash
# Checks the recipes without a VM or a container engine: runs the unit's
# ExecStart (`elsa server --config deploy/elsa.toml`) on three hosts db1..db3
# made of network namespaces (10.0.0.11-13 on a bridge of their own, names in
# /etc/netns/<ns>/hosts), as nobody with no new privileges — only bind,
# node-id, data-dir and the secret's path overridden (ELSA_* variables) —
# then checks the region forms over TLS peer links, a write on db1 reads on
# db3, and SIGTERM stops every node with status 0. Needs root, iproute2 and
# redis-cli. Usage (repository root): deploy/check.sh [path/to/elsa]
set -u
cd "$(dirname "$0")/.."
P=elsa-$$-deploy
BIN=${1:-target/release/elsa}
CONF=$(realpath deploy/elsa.toml)
W=$(mktemp -d /tmp/elsa-deploy.XXXX); chmod 755 $W
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > $W/cluster.secret
chown 65534:65534 $W/cluster.secret; chmod 600 $W/cluster.secret
cp "$BIN" $W/elsa; chmod 755 $W/elsa
ip netns add $P-sw; ip -n $P-sw link add br0 type bridge; ip -n $P-sw link set br0 up
pids=()
for i in 1 2 3; do
  ns=$P-db$i
  ip netns add $ns
  ip -n $P-sw link add p$i type veth peer name eth0 netns $ns
  ip -n $P-sw link set p$i master br0 up
  ip -n $ns addr add 10.0.0.1$i/24 dev eth0; ip -n $ns link set eth0 up; ip -n $ns link set lo up
  mkdir -p /etc/netns/$ns
  printf '127.0.0.1 localhost\n10.0.0.11 db1.eu.example\n10.0.0.12 db2.eu.example\n10.0.0.13 db3.eu.example\n10.0.0.21 db1.us.example\n' > /etc/netns/$ns/hosts
  install -d -o 65534 -g 65534 -m 750 $W/data$i
done
for i in 1 2 3; do
  ns=$P-db$i
  ELSA_LOG=info ELSA_BIND=10.0.0.1$i ELSA_NODE_ID=1$i ELSA_DATA_DIR=$W/data$i ELSA_CLUSTER_SECRET_FILE=$W/cluster.secret \
    ip netns exec $ns setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs \
    $W/elsa server --config $CONF > $W/log$i 2>&1 &
  pids+=($!)
done
ok=0
for t in $(seq 1 300); do
  s=$(ip netns exec $P-db1 redis-cli -h 10.0.0.11 -a change-me --no-auth-warning info replication 2>/dev/null)
  if echo "$s" | grep -q "^members:3" && echo "$s" | grep -q "catching_up:0" && ! echo "$s" | grep -q ",ready=0,"; then ok=1; break; fi
  sleep 0.2
done
echo "formed=$ok after $t polls"
ip netns exec $P-db1 redis-cli -h 10.0.0.11 -a change-me --no-auth-warning set deployed yes
got=$(ip netns exec $P-db3 redis-cli -h 10.0.0.13 -a change-me --no-auth-warning get deployed)
echo "get on db3: $got"
fail=0
[ "$ok" = 1 ] && [ "$got" = yes ] || fail=1
ip netns exec $P-db2 redis-cli -h 10.0.0.12 -a change-me --no-auth-warning info replication | grep -E "^(members|peer_links|slots_primary|region):"
ps -o user=,pid=,args= -p ${pids[0]} | cut -c1-80
kill -TERM ${pids[@]}
for p in ${pids[@]}; do wait $p; rc=$?; echo "exit $p: $rc"; [ $rc = 0 ] || fail=1; done
grep -h "SIGTERM\|WARN\|ERROR" $W/log1 | sed 's/\x1b\[[0-9;]*m//g' | head -5
for i in 1 2 3; do ip netns del $P-db$i; rm -rf /etc/netns/$P-db$i; done; ip netns del $P-sw
rm -rf $W
if [ $fail = 0 ]; then echo "deploy check: ok"; else echo "deploy check: FAILED"; fi
exit $fail
