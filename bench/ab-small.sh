#!/usr/bin/env bash
# Two Elsa builds on small collections (issue 43: what packing costs in
# time): writes and reads of hashes, sets and sorted sets of ~10 entries
# (redis-benchmark -P 16 -c 50 -n 1000000 -r 100000: 100k keys, a random
# field or member each), one worker pinned to core 0 and the client to
# core 1, requests per second. Runs alternate A and B.
#   bench/ab-small.sh A_BINARY B_BINARY [RUNS]   (RUNS per build, default 2)
set -euo pipefail
A=$1 B=$2 RUNS=${3:-2}
run() { # binary -> one line of CMD=requests/s
  local bin=$1 port dir pid out="" r
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  dir=$(mktemp -d /tmp/elsa-ab-small.XXXXXX)
  taskset -c 0 "$bin" server --port "$port" --data-dir "$dir" --appendfsync no --workers 1 >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
  for c in "HSET h:__rand_int__ f__rand_int__ v" "SADD s:__rand_int__ __rand_int__" \
           "ZADD z:__rand_int__ __rand_int__ m__rand_int__" "HGET h:__rand_int__ f__rand_int__" \
           "SISMEMBER s:__rand_int__ __rand_int__"; do
    # shellcheck disable=SC2086 # the command's words
    r=$(taskset -c 1 redis-benchmark -p "$port" -q -P 16 -c 50 -n 1000000 -r 100000 $c 2>/dev/null \
      | tr '\r' '\n' | grep -oE "[0-9.]+ requests per second" | tail -1 | cut -d' ' -f1)
    out="$out ${c%% *}=$r"
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true; rm -rf "$dir"
  echo "$out"
}
for _ in $(seq "$RUNS"); do
  echo "A$(run "$A")"
  echo "B$(run "$B")"
done
