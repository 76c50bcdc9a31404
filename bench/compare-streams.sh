#!/usr/bin/env bash
# Streams, Elsa vs Redis on this machine in one run (issue 46):
# redis-benchmark -q -P 16 -c 50 -n N of XADD (`*`, three fields), XRANGE
# (10 entries), XREADGROUP (`>`, one entry each) and XACK (random pending
# IDs), alternating between the servers (RUNS each; the machine is noisy),
# medians and the ratio. Each run starts from a stream of N entries with
# IDs 1-0 … N-0 and a group at 0, made through redis-cli --pipe.
# Both servers start through bench/lib.sh (free loopback ports, stopped by
# PID), without persistence.
# Usage: bench/compare-streams.sh [RUNS] [WORKERS]
RUNS=${1:-3}
WORKERS=${2:-0}
N=${N:-200000}
DURABILITY=none
ELSA_FLAGS="--workers $WORKERS"
source "$(dirname "$0")/lib.sh"
if [ -n "${ELSA_BIN:-}" ]; then ELSA=$ELSA_BIN; else build; fi
start_elsa
start_redis
EP=${ELSA_URL##*:}
RP=${REDIS_URL##*:}

fill() { # port: a fresh stream of N entries and a group
  redis-cli -p "$1" DEL s x >/dev/null
  python3 - "$N" <<'PY' | redis-cli -p "$1" --pipe >/dev/null
import sys
n = int(sys.argv[1])
out = sys.stdout.buffer
for i in range(1, n + 1):
    args = [b"XADD", b"s", b"%d-0" % i, b"a", b"%08d" % i, b"b", b"x", b"c", b"y"]
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        out.write(b"$%d\r\n%s\r\n" % (len(a), a))
PY
  redis-cli -p "$1" XGROUP CREATE s g 0 >/dev/null
}
one() { # port name command... -> "NAME rps"
  local p=$1 name=$2
  shift 2
  redis-benchmark -p "$p" -q -P 16 -c 50 -n "$N" -r "$N" "$@" 2>/dev/null | tr '\r' '\n' \
    | sed -n "s/^[^:]*: \([0-9.]*\) requests per second.*/$name \1/p" | tail -1
}
run() { # port -> "TEST rps" lines
  fill "$1"
  one "$1" XADD XADD x '*' a 1 b 2 c 3
  one "$1" XRANGE XRANGE s - + COUNT 10
  one "$1" XREADGROUP XREADGROUP GROUP g c COUNT 1 STREAMS s '>'
  one "$1" XACK XACK s g __rand_int__-0
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "redis-benchmark -q -P 16 -c 50 -n $N (elsa workers=$WORKERS, $(nproc) cores), $RUNS alternating runs"
declare -A E R
for i in $(seq "$RUNS"); do
  while read -r t v; do E[$t]+="$v "; done < <(run "$EP")
  while read -r t v; do R[$t]+="$v "; done < <(run "$RP")
done
for t in XADD XRANGE XREADGROUP XACK; do
  # shellcheck disable=SC2086
  e=$(median ${E[$t]}); r=$(median ${R[$t]})
  echo "$t: elsa $e redis $r ratio $(python3 -c "print(round($e/$r,2))")   (runs: elsa ${E[$t]}/ redis ${R[$t]})"
done
