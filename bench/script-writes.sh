#!/usr/bin/env bash
# One transaction writing one collection many times, Elsa vs Redis in one
# run (issue 41, defect 11): seconds for
#   eval   EVAL "for i=1,N do redis.call('SADD',KEYS[1],i) end" 1 <fresh key>
#   multi  MULTI, N × SADD <fresh key> i, EXEC (one pipelined write)
# for each N in NS (default "1000 10000 100000"), median of RUNS (default 3)
# alternating between the servers, and the ratio Elsa/Redis. Each buffered
# write used to copy the whole collection (100 000 SADDs in a script took
# 135 s); it now costs what the command costs plus, in a script, one round
# trip between the script thread and the connection's shard thread (both
# poll before they sleep: 2026-11-29, eval 100000 4.2x, multi 2.8x). A
# call reads its arguments off the Lua stack (no table, no mlua value per
# argument) and a commit reads the built collection where it is (no
# copies): 2026-11-29 session 31, eval 100000 1.9-2.9x, multi 2.6-3.1x.
# Usage: bench/script-writes.sh [RUNS]
RUNS=${1:-3}
NS=${NS:-"1000 10000 100000"}
DURABILITY=none
source "$(dirname "$0")/lib.sh"
build
start_elsa
start_redis
EP=${ELSA_URL##*:}
RP=${REDIS_URL##*:}

secs() { # command... -> elapsed seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

multi_file() { # n -> path of a MULTI block of n SADDs in RESP
  python3 - "$1" "$TMP/multi-$1.resp" <<'PY'
import sys
n, path = int(sys.argv[1]), sys.argv[2]
def cmd(*a):
    out = b"*%d\r\n" % len(a)
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    return out
with open(path, "wb") as f:
    f.write(cmd("MULTI"))
    for i in range(n):
        f.write(cmd("SADD", "bench:m", i))
    f.write(cmd("EXEC"))
PY
  echo "$TMP/multi-$1.resp"
}

printf '%-6s %8s %10s %10s %7s\n' kind N elsa_s redis_s ratio
for n in $NS; do
  body="for i=1,$n do redis.call('SADD',KEYS[1],i) end return 1"
  mf=$(multi_file "$n")
  for kind in eval multi; do
    e=(); r=()
    for run in $(seq "$RUNS"); do
      for side in elsa redis; do
        port=$EP; [ $side = redis ] && port=$RP
        redis-cli -p "$port" del bench:e bench:m >/dev/null
        if [ $kind = eval ]; then
          t=$(secs redis-cli -p "$port" eval "$body" 1 bench:e)
        else
          t=$(secs sh -c "redis-cli -p $port --pipe < $mf")
        fi
        if [ $side = elsa ]; then e+=("$t"); else r+=("$t"); fi
      done
    done
    em=$(printf '%s\n' "${e[@]}" | median)
    rm_=$(printf '%s\n' "${r[@]}" | median)
    printf '%-6s %8s %10.3f %10.3f %7.2f\n' $kind "$n" "$em" "$rm_" "$(awk -v a="$em" -v b="$rm_" 'BEGIN { print a / b }')"
  done
done
