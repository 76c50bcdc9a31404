#!/usr/bin/env bash
# Lists, Elsa vs Redis on this machine in one run (issue 14):
# redis-benchmark -q -P 16 -c 50 -n N -t lpush,rpush,lpop,rpop,lrange_100,
# alternating between the servers (RUNS each; the machine is noisy),
# medians and the ratio. (redis-benchmark fills the list LRANGE_100 reads
# first; LPOP and RPOP pop what the pushes before them left.)
# Both servers start through bench/lib.sh (free loopback ports, stopped
# by PID), without persistence.
# Usage: bench/compare-lists.sh [RUNS] [WORKERS]
RUNS=${1:-3}
WORKERS=${2:-0}
N=${N:-300000}
DURABILITY=none
ELSA_FLAGS="--workers $WORKERS"
source "$(dirname "$0")/lib.sh"
build
start_elsa
start_redis
EP=${ELSA_URL##*:}
RP=${REDIS_URL##*:}
TESTS=lpush,rpush,lpop,rpop,lrange_100

run() { # port -> "TEST rps" lines
  redis-benchmark -p "$1" -q -P 16 -c 50 -n "$N" -t "$TESTS" 2>/dev/null | tr '\r' '\n' \
    | grep -v 'needed to benchmark' \
    | sed -n 's/^\([A-Z_0-9]*\)[^:]*: \([0-9.]*\) requests per second.*/\1 \2/p'
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "redis-benchmark -q -P 16 -c 50 -n $N -t $TESTS (elsa workers=$WORKERS, $(nproc) cores), $RUNS alternating runs"
declare -A E R
for i in $(seq "$RUNS"); do
  while read -r t v; do E[$t]+="$v "; done < <(run "$EP")
  while read -r t v; do R[$t]+="$v "; done < <(run "$RP")
done
for t in LPUSH RPUSH LPOP RPOP LRANGE_100; do
  # shellcheck disable=SC2086
  e=$(median ${E[$t]}); r=$(median ${R[$t]})
  echo "$t: elsa $e redis $r ratio $(python3 -c "print(round($e/$r,2))")   (runs: elsa ${E[$t]}/ redis ${R[$t]})"
done
