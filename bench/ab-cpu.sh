#!/usr/bin/env bash
# Two Elsa builds against each other, per core: each server pinned to core
# 0 and the client to core 1 (as bench/compare-cpu.sh), the server's CPU
# ticks read from /proc/PID/stat around each run. Against itself Elsa's
# figure is far steadier than a ratio to Redis (whose own figures move by
# up to 1.5x between runs here), so a change of a few percent shows.
#
# Runs alternate A and B; the second half swaps the order (so whatever the
# first run of a pair leaves behind is paid by both builds). Prints each
# run, then per workload the median ticks and requests per CPU-second.
#
# Usage: bench/ab-cpu.sh A_BINARY B_BINARY [RUNS]   (RUNS per build, even;
#        env: ONLY="batch-tx batch-pipe set get"; also ping-1 and get-1
#        (unpipelined, 16 connections), set-hot and
#        get-hot (one key, 2M requests), ycsb-a (after an
#        unmeasured load) and commit, Cedar's
#        test, 50 threads, against --appendfsync always; WORKERS=2 runs
#        each server with two shards on its one core, so batches commit
#        across shards)
# E.g. A from a worktree of the previous commit:
#   git worktree add /tmp/a HEAD~1 && cp -r target/release /tmp/a-target/ &&
#   (cd /tmp/a && CARGO_TARGET_DIR=/tmp/a-target cargo build --release)
#   bench/ab-cpu.sh /tmp/a-target/release/elsa target/release/elsa 12
source "$(dirname "$0")/lib.sh"
A=$1 B=$2 RUNS=${3:-12}
ONLY=${ONLY:-"batch-tx batch-pipe set get"}
WORKERS=${WORKERS:-1}
[ "$(nproc)" -ge 2 ] || { echo "needs 2 cores (server on one, client on the other)"; exit 1; }

# One run of workload $2 against a fresh server from binary $1: prints
# "requests ticks".
run() {
  local bin=$1 w=$2 port dir pid t0 t1 ops
  port=$(free_port); dir=$TMP/data; rm -rf "$dir"
  local fsync=no; [ "$w" = commit ] && fsync=always
  taskset -c 0 "$bin" server --port "$port" --workers "$WORKERS" --appendfsync "$fsync" --data-dir "$dir" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  # With ownership = leases (a wrapper may add it), not before the lease.
  for _ in $(seq 100); do
    redis-cli -p "$port" info replication | grep -q '^ownership:leases' || break
    redis-cli -p "$port" info replication | grep -q '^lease_ms_left:[1-9]' && break
    sleep 0.1
  done
  # GET reads keys that exist (as compare-cpu.sh's, which runs after SET).
  [ "$w" = get-hot ] && redis-cli -p "$port" set key:__rand_int__ xxx >/dev/null
  case $w in get|get-1) taskset -c 1 redis-benchmark -p "$port" -P 16 -c 50 -r 1000000 -n 1000000 -t set -q >/dev/null 2>&1 ;; esac
  [ "$w" = ycsb-a ] && taskset -c 1 "$ELSA" bench ycsb load -P workloads/workloada --threads 16 \
    -u "redis://127.0.0.1:$port" >/dev/null 2>&1
  t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  case $w in
    batch-tx|batch-pipe)
      local kind=tx; [ "$w" = batch-pipe ] && kind=pipeline
      taskset -c 1 "$ELSA" bench batch --op-type "$kind" --batch-size 6 --get-ratio 0.5 \
        --connections 64 --num-ops 50000 -u "redis://127.0.0.1:$port" -o "$TMP/out.json" >/dev/null 2>&1
      ops=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[-1]["operations"])' "$TMP/out.json") ;;
    set|get)
      taskset -c 1 redis-benchmark -p "$port" -P 16 -c 50 -r 1000000 -n 1000000 -t "$w" -q >/dev/null 2>&1
      ops=1000000 ;;
    set-hot|get-hot)
      # One key (no -r): the fixed cost per request, without a lookup's
      # cache misses.
      taskset -c 1 redis-benchmark -p "$port" -P 16 -c 50 -n 2000000 -t "${w%-hot}" -q >/dev/null 2>&1
      ops=2000000 ;;
    ping-1|get-1)
      # Unpipelined, as YCSB's threads send: one request per read and
      # write on each side, 16 connections. ping-1 is the floor any
      # command pays (I/O, runtime, parse, reply); get-1 adds a lookup.
      local t=${w%-1}; [ "$t" = ping ] && t=ping_mbulk
      taskset -c 1 redis-benchmark -p "$port" -c 16 -r 1000000 -n 300000 -t "$t" -q >/dev/null 2>&1
      ops=300000 ;;
    ycsb-a)
      taskset -c 1 "$ELSA" bench ycsb run -P workloads/workloada -p operationcount=200000 \
        --threads 16 -u "redis://127.0.0.1:$port" >/dev/null 2>&1
      ops=200000 ;;
    commit)
      taskset -c 1 "$ELSA" bench commit --threads 50 --num-ops 50000 \
        -u "redis://127.0.0.1:$port" -o "$TMP/out.json" >/dev/null 2>&1
      ops=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[-1]["operations"])' "$TMP/out.json") ;;
    *) echo "unknown workload $w" >&2; exit 1 ;;
  esac
  t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  echo "$ops $((t1 - t0))"
}

log=$TMP/runs
for w in $ONLY; do
  for r in $(seq "$RUNS"); do
    order="A B"; [ "$r" -gt $((RUNS / 2)) ] && order="B A"
    for x in $order; do
      bin=$A; [ "$x" = B ] && bin=$B
      read -r ops ticks <<<"$(run "$bin" "$w")"
      echo "$w $x $ops $ticks" | tee -a "$log"
    done
  done
done
python3 - "$log" "$(getconf CLK_TCK)" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    w, x, ops, ticks = line.split()
    runs[(w, x)].append((int(ops), int(ticks)))
hz = int(sys.argv[2])
print("\n| workload | A ticks (median) | B ticks (median) | A req/CPU-s | B req/CPU-s | B/A |")
print("|---|---|---|---|---|---|")
for w in dict.fromkeys(k[0] for k in runs):
    a, b = runs[(w, "A")], runs[(w, "B")]
    ta, tb = statistics.median(t for _, t in a), statistics.median(t for _, t in b)
    ra, rb = a[0][0] * hz / max(ta, 1), b[0][0] * hz / max(tb, 1)
    print(f"| {w} | {ta:g} | {tb:g} | {ra:,.0f} | {rb:,.0f} | {rb / ra:.3f} |")
EOF
