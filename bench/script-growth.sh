#!/usr/bin/env bash
# Many scripts, each writing one element to the same growing collection,
# Elsa vs Redis in one run: seconds for N pipelined
#   EVAL "redis.call('<CMD>',KEYS[1],ARGV[1]...)" 1 bench:g <i>
# (LPUSH, RPUSH, SADD, HSET, ZADD), each a transaction of its own, and the
# ratio Elsa/Redis. This is how job queues (BullMQ, Redisson) use scripts:
# one job pushed onto a long list or sorted set per call. A commit used to
# compare the whole collection (O(n) per script, O(n log n) for a list:
# 4,000 LPUSHes 5.8 s against Redis's 26 ms); it now compares only the
# elements the script's deltas named (`crates/lattice/src/touched.rs`),
# and what remains per script is one copy of the collection on its first
# write and the script's round trips.
# Usage: bench/script-growth.sh [N]   (default 4000)
N=${1:-4000}
DURABILITY=none
source "$(dirname "$0")/lib.sh"
build
start_elsa
start_redis
EP=${ELSA_URL##*:}
RP=${REDIS_URL##*:}

requests() { # body -> path of N EVALs of body in RESP
  python3 - "$N" "$1" "$TMP/growth.resp" <<'PY'
import sys
n, body, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def cmd(*a):
    out = b"*%d\r\n" % len(a)
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    return out
with open(path, "wb") as f:
    for i in range(n):
        f.write(cmd("EVAL", body, 1, "bench:g", "m%d" % i))
PY
  echo "$TMP/growth.resp"
}
secs() { # port file -> elapsed seconds of the pipe
  local t0 t1
  t0=$(date +%s.%N)
  redis-cli -p "$1" --pipe <"$2" >/dev/null
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}

printf '%-6s %6s %8s %8s %7s\n' cmd N elsa_s redis_s ratio
for c in LPUSH RPUSH SADD HSET ZADD; do
  case $c in
    HSET) body="redis.call('HSET',KEYS[1],ARGV[1],'v')" ;;
    ZADD) body="redis.call('ZADD',KEYS[1],1,ARGV[1])" ;;
    *) body="redis.call('$c',KEYS[1],ARGV[1])" ;;
  esac
  f=$(requests "$body")
  redis-cli -p "$EP" del bench:g >/dev/null
  redis-cli -p "$RP" del bench:g >/dev/null
  e=$(secs "$EP" "$f")
  r=$(secs "$RP" "$f")
  printf '%-6s %6s %8.3f %8.3f %7.1f\n' $c "$N" "$e" "$r" "$(awk -v a="$e" -v b="$r" 'BEGIN { print a / b }')"
done
