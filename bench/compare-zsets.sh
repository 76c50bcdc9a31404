#!/usr/bin/env bash
# Sorted sets, Elsa vs Redis on this machine in one run (issue 14):
# redis-benchmark -q -P 16 -c 50 -n N, alternating between the servers
# (RUNS each; the machine is noisy), medians and the ratio, for
#   ZADD     -t zadd   (random members of one key, -r 100000)
#   ZPOPMIN  -t zpopmin
#   ZRANGE   ZRANGE bench:z 0 9 WITHSCORES on a 10 000-member set, and
#   ZRANK    ZRANK bench:z <member> — the O(log n) reads.
# Both servers start through bench/lib.sh (free loopback ports, stopped
# by PID), without persistence.
# Usage: bench/compare-zsets.sh [RUNS] [WORKERS]
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
tmp=$TMP
# The set the reads run on.
python3 - "$tmp/load.resp" <<'PY'
import sys
with open(sys.argv[1], "wb") as f:
    for b in range(0, 10000, 500):
        args = [b"ZADD", b"bench:z"]
        for i in range(b, b + 500):
            args += [b"%d" % ((i * 7919) % 10000), b"m%05d" % i]
        f.write(b"*%d\r\n" % len(args))
        for a in args:
            f.write(b"$%d\r\n%s\r\n" % (len(a), a))
PY
for p in "$EP" "$RP"; do redis-cli -p "$p" --pipe <"$tmp/load.resp" >/dev/null; done

rps() { # port args... -> requests per second
  local p=$1; shift
  redis-benchmark -p "$p" -q -P 16 -c 50 -n "$N" "$@" 2>/dev/null | tr '\r' '\n' \
    | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "redis-benchmark -q -P 16 -c 50 -n $N (elsa workers=$WORKERS, $(nproc) cores), $RUNS alternating runs"
for t in zadd zpopmin zrange zrank; do
  case $t in
    zadd|zpopmin) args=(-r 100000 -t "$t") ;;
    zrange) args=(ZRANGE bench:z 0 9 WITHSCORES) ;;
    zrank) args=(-r 10000 ZRANK bench:z m0__rand_int__) ;;
  esac
  e=(); r=()
  for i in $(seq "$RUNS"); do
    e+=("$(rps "$EP" "${args[@]}")"); r+=("$(rps "$RP" "${args[@]}")")
  done
  E=$(median "${e[@]}"); R=$(median "${r[@]}")
  echo "$t: elsa $E redis $R ratio $(python3 -c "print(round($E/$R,2))")   (runs: elsa ${e[*]} / redis ${r[*]})"
done
