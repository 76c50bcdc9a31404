#!/usr/bin/env bash
# Memory of a cluster at rest against one Redis holding the same data
# (issue 43's cluster row): N strings of SIZE bytes loaded through region
# r1's node of a two-region cluster (one node a region, `elsa cluster up`),
# measured on every node once the other region holds them all and the
# cluster is quiet; then the same keys in one Elsa node alone and in one
# redis-server, each empty at start, one worker, no persistence.
#   bench/memory-cluster.sh                  (200k strings of 200 bytes)
#   N=500000 SIZE=100 bench/memory-cluster.sh
#   ELSA_BIN=/path/to/elsa bench/memory-cluster.sh   (that build, no cargo build)
# Prints, per server: growth of RSS and of used_memory per key, the ratio to
# Redis's, and INFO's mem_not_counted_for_evict (replication state the
# eviction limit does not count).
DURABILITY=none
source "$(dirname "$0")/lib.sh"
if [ -n "${ELSA_BIN:-}" ]; then ELSA=$ELSA_BIN; else build; fi
python3 -c 'import redis' 2>/dev/null || { echo "needs redis-py: pip install redis" >&2; exit 1; }
N=${N:-200000}
SIZE=${SIZE:-200}

# port pid -> "rss used not_counted" (bytes, absolute)
measure() {
  python3 - "$1" "$2" <<'PY'
import sys, redis
port, pid = int(sys.argv[1]), int(sys.argv[2])
info = redis.Redis(port=port).info("memory")
with open(f"/proc/{pid}/status") as f:
    rss = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
print(rss, info["used_memory"], info.get("mem_not_counted_for_evict", 0))
PY
}

load() { # port
  python3 - "$1" "$N" "$SIZE" <<'PY'
import sys, redis
port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
p = redis.Redis(port=port).pipeline(transaction=False)
for i in range(n):
    p.set(b"k:%09d" % i, (b"%09d" % i) * (size // 9) + b"v" * (size % 9))
    if i % 1000 == 999:
        p.execute()
p.execute()
PY
}

dbsize() { redis-cli -p "$1" dbsize 2>/dev/null || echo 0; }

# A server started alone on a free port: name start-command... -> sets PORT PID
alone() {
  PORT=$(free_port)
  "$@" --port "$PORT" >"$TMP/alone.log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  wait_ping "$PORT"
}

report() { # label before after keys base_used_per_key
  read -r rss0 used0 _ <<<"$2"
  read -r rss1 used1 nc <<<"$3"
  python3 - "$1" "$rss0" "$used0" "$rss1" "$used1" "$nc" "$4" "$5" <<'PY'
import sys
label = sys.argv[1]
rss0, used0, rss1, used1, nc, n = map(int, sys.argv[2:8])
base = sys.argv[8].split()
rss, used = (rss1 - rss0) / n, (used1 - used0) / n
ratio = f"  ({rss / float(base[0]):.2f}x, {used / float(base[1]):.2f}x Redis)" if base else ""
print(f"{label:<28} RSS {rss:7.0f} B/key  used {used:7.0f} B/key{ratio}  mem_not_counted_for_evict {nc}")
PY
}

echo "# $N strings of $SIZE bytes; $(machine)"
# Redis.
alone redis-server --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP"
before=$(measure "$PORT" "$PID")
load "$PORT"
sleep 1
after=$(measure "$PORT" "$PID")
read -r r0 u0 _ <<<"$before"
read -r r1 u1 _ <<<"$after"
BASE="$(((r1 - r0) / N)) $(((u1 - u0) / N))"
report "redis-server" "$before" "$after" "$N" ""
kill "$PID"

# One Elsa node alone.
alone "$ELSA" server --data-dir "$TMP/one" --workers 1 --appendfsync no
before=$(measure "$PORT" "$PID")
load "$PORT"
sleep 2
after=$(measure "$PORT" "$PID")
report "elsa, one node" "$before" "$after" "$N" "$BASE"
kill "$PID"

# Two regions of one node.
CL=$TMP/cluster
CBASE=$((10000 + RANDOM % 8000))
trap '"$ELSA" cluster down --dir "$CL" --purge >/dev/null 2>&1 || true; cleanup' EXIT
"$ELSA" cluster up --regions 2 --nodes-per-region 1 --base-port "$CBASE" --dir "$CL" \
  --workers 1 --appendfsync no --fresh >"$TMP/up.txt"
pid_of() { pgrep -f -- "--port $1( |$)" | head -1; }
P1=$(pid_of "$CBASE")
P2=$(pid_of $((CBASE + 1)))
[ -n "$P1" ] && [ -n "$P2" ] || { echo "cannot find the nodes' PIDs" >&2; cat "$TMP/up.txt" >&2; exit 1; }
sleep 2
b1=$(measure "$CBASE" "$P1")
b2=$(measure $((CBASE + 1)) "$P2")
load "$CBASE"
for _ in $(seq 600); do
  [ "$(dbsize $((CBASE + 1)))" = "$N" ] && break
  sleep 0.2
done
# At rest: anti-entropy rounds done, buffers drained.
sleep "${REST:-15}"
a1=$(measure "$CBASE" "$P1")
a2=$(measure $((CBASE + 1)) "$P2")
report "elsa cluster, r1 (written)" "$b1" "$a1" "$N" "$BASE"
report "elsa cluster, r2 (merged)" "$b2" "$a2" "$N" "$BASE"
