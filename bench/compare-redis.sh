#!/usr/bin/env bash
# Elsa vs Redis on this machine, in one run:
#   1. redis-benchmark -q -P 16 -c 50 -n 1000000 -t set,get, alternating
#      between the two servers (RUNS each; the machine is noisy), medians
#      and the ratio;
#   2. resident memory after loading 1M keys x 100-byte values into each.
# Both servers are started here on free loopback ports and stopped by PID.
# Usage: bench/compare-redis.sh [RUNS] [WORKERS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
WORKERS=${2:-0}
N=${N:-1000000}
cargo build --release --bin elsa >/dev/null 2>&1
command -v redis-server >/dev/null || { echo "needs redis-server (apt-get install redis-server redis-tools)"; exit 1; }
tmp=$(mktemp -d)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
EP=$(port); RP=$(port)
target/release/elsa server --port "$EP" --workers "$WORKERS" --data-dir "$tmp/elsa" >"$tmp/elsa.log" 2>&1 &
EPID=$!
redis-server --port "$RP" --save "" --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
RPID=$!
trap 'kill $EPID $RPID 2>/dev/null || true; rm -rf "$tmp"' EXIT
for p in "$EP" "$RP"; do
  for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done

bench() { # port -> "set get"
  redis-benchmark -p "$1" -q -P 16 -c 50 -n "$N" -t set,get 2>/dev/null | tr '\r' '\n' \
    | awk '/requests per second/ {printf "%s ", $2}'
}
echo "redis-benchmark -q -P 16 -c 50 -n $N -t set,get  (elsa workers=$WORKERS, $(nproc) cores)"
es=(); eg=(); rs=(); rg=()
for i in $(seq "$RUNS"); do
  read -r s g <<<"$(bench "$EP")"; es+=("$s"); eg+=("$g"); echo "run $i elsa : SET $s GET $g"
  read -r s g <<<"$(bench "$RP")"; rs+=("$s"); rg+=("$g"); echo "run $i redis: SET $s GET $g"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ES=$(median "${es[@]}"); EG=$(median "${eg[@]}"); RS=$(median "${rs[@]}"); RG=$(median "${rg[@]}")
echo "median SET: elsa $ES redis $RS ratio $(python3 -c "print(round($ES/$RS,2))")"
echo "median GET: elsa $EG redis $RG ratio $(python3 -c "print(round($EG/$RG,2))")"

# Memory: the same 1M keys x 100 B in each, loaded with redis-cli --pipe.
redis-cli -p "$EP" flushall >/dev/null; redis-cli -p "$RP" flushall >/dev/null
python3 - "$tmp/load.resp" <<'PY'
import sys
v = b"x" * 100
with open(sys.argv[1], "wb") as f:
    for i in range(1_000_000):
        k = b"key:%012d" % i
        f.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$100\r\n%s\r\n" % (len(k), k, v))
PY
rss() { awk '/VmRSS/ {print $2*1024}' "/proc/$1/status"; }
E0=$(rss $EPID); R0=$(rss $RPID)
redis-cli -p "$EP" --pipe <"$tmp/load.resp" >/dev/null
redis-cli -p "$RP" --pipe <"$tmp/load.resp" >/dev/null
sleep 1
E1=$(rss $EPID); R1=$(rss $RPID)
echo "keys: elsa $(redis-cli -p "$EP" dbsize) redis $(redis-cli -p "$RP" dbsize)"
echo "RSS after 1M x 100 B: elsa $((E1/1048576)) MiB (empty $((E0/1048576))), redis $((R1/1048576)) MiB (empty $((R0/1048576))), ratio $(python3 -c "print(round($E1/$R1,2))")"
