#!/usr/bin/env bash
# Memory per key of many small keys, Elsa against Redis on the same machine
# in the same run (issue 43): 1M strings of 100 bytes, and 100k hashes,
# sets, sorted sets and lists of 10 short elements each — the shapes most
# Redis data has. Each server starts empty, one worker, no persistence
# (Redis --appendonly no --save ""; Elsa --appendfsync no --workers 1); the
# keys are loaded through redis-py pipelines, then the script reads the
# growth per key of the server's RSS (VmRSS) and of INFO's used_memory, and
# MEMORY USAGE of one key.
#   bench/memory-small.sh              (all shapes)
#   SHAPES="hash set" bench/memory-small.sh
#   N=20000 bench/memory-small.sh      (keys per collection shape; strings 10×N)
#   ELSA_BIN=/path/to/elsa bench/memory-small.sh   (that build, no cargo build)
# Prints one line per shape: bytes per key for Redis and Elsa, and the ratio.
DURABILITY=none
source "$(dirname "$0")/lib.sh"
if [ -n "${ELSA_BIN:-}" ]; then ELSA=$ELSA_BIN; else build; fi
python3 -c 'import redis' 2>/dev/null || { echo "needs redis-py: pip install redis" >&2; exit 1; }
ELSA_FLAGS="--workers 1 ${ELSA_FLAGS:-}"
N=${N:-100000}

run_shape() { # shape url pid -> "rss_per_key used_per_key memory_usage"
  python3 - "$1" "$2" "$3" "$N" <<'PY'
import sys, time, redis
shape, url, pid, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
r = redis.Redis.from_url(url)

def rss():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

def used():
    return int(r.info("memory")["used_memory"])

keys = n * 10 if shape == "string" else n
time.sleep(0.5)
rss0, used0 = rss(), used()
p = r.pipeline(transaction=False)
for i in range(keys):
    if shape == "string":
        p.set(b"s:%09d" % i, b"v" * 100)
    elif shape == "hash":
        p.hset(b"h:%07d" % i, mapping={b"field%d" % j: b"val%05d" % (i + j) for j in range(10)})
    elif shape == "set":
        p.sadd(b"s:%07d" % i, *[str((i * 7 + j * 13) % 1000) for j in range(10)])
    elif shape == "zset":
        p.zadd(b"z:%07d" % i, {b"member%d" % j: (i + j) % 100 for j in range(10)})
    elif shape == "list":
        p.rpush(b"l:%07d" % i, *[b"item%04d" % ((i + j) % 10000) for j in range(10)])
    if i % 1000 == 999:
        p.execute()
p.execute()
time.sleep(1.5)
sample = {"string": b"s:000000007", "hash": b"h:0000007", "set": b"s:0000007",
          "zset": b"z:0000007", "list": b"l:0000007"}[shape]
usage = r.memory_usage(sample) or 0
print(f"{(rss() - rss0) / keys:.0f} {(used() - used0) / keys:.0f} {usage}")
PY
}

printf "%-7s %9s | %12s %12s %8s | %12s %12s %8s | %s\n" shape keys \
  "Redis RSS/k" "used/k" "MEMUSAGE" "Elsa RSS/k" "used/k" "MEMUSAGE" "Elsa/Redis (RSS, used)"
for s in ${SHAPES:-string hash set zset list}; do
  start_redis
  read -r rr ru rm < <(run_shape "$s" "$REDIS_URL" "${PIDS[-1]}")
  kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true
  start_elsa
  read -r er eu em < <(run_shape "$s" "$ELSA_URL" "${PIDS[-1]}")
  kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true
  rm -rf "$TMP/elsa"
  keys=$N; [ "$s" = string ] && keys=$((N * 10))
  printf "%-7s %9s | %12s %12s %8s | %12s %12s %8s | %.2f %.2f\n" "$s" "$keys" \
    "$rr" "$ru" "$rm" "$er" "$eu" "$em" "$(echo "$er / $rr" | bc -l)" "$(echo "$eu / $ru" | bc -l)"
done
