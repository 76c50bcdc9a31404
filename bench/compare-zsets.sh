#!/usr/bin/env bash
# Sorted sets, Elsa vs Redis on this machine in one run (issue 14):
# redis-benchmark -q -P 16 -c 50 -n N, alternating between the servers
# (RUNS each; the machine is noisy), medians and the ratio, for
#   ZADD     -t zadd   (random members of one key, -r 100000)
#   ZPOPMIN  -t zpopmin
#   ZRANGE   ZRANGE bench:z 0 9 WITHSCORES on a 10 000-member set, and
#   ZRANK    ZRANK bench:z <member> — the O(log n) reads.
# Both servers start here on free loopback ports, stopped by PID.
# Usage: bench/compare-zsets.sh [RUNS] [WORKERS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
WORKERS=${2:-0}
N=${N:-300000}
cargo build --release --bin elsa >/dev/null 2>&1
tmp=$(mktemp -d)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
EP=$(port); RP=$(port)
target/release/elsa server --port "$EP" --workers "$WORKERS" --data-dir "$tmp/elsa" --appendfsync no >"$tmp/elsa.log" 2>&1 &
EPID=$!
redis-server --port "$RP" --save "" --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
RPID=$!
trap 'kill $EPID $RPID 2>/dev/null || true; rm -rf "$tmp"' EXIT
for p in "$EP" "$RP"; do
  for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
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
