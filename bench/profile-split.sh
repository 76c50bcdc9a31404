#!/usr/bin/env bash
# What each server spends per request, by kind of work (issue 18's "what
# remains between Elsa and Redis per request"): Elsa (--workers 1
# --appendfsync no) and Redis (no persistence, or an AOF with appendfsync no
# when PEER_LOG=1) pinned to core 0, the client to core 1, as
# bench/compare-cpu.sh. Each server is profiled (`perf record -e cpu-clock`,
# the VM has no hardware counters) for one run of the workload while its
# CPU ticks are read around it; bench/profile-split.py sums the self
# samples into buckets, and the bucket's share of the server's CPU per
# request gives nanoseconds per request.
#
# Usage: bench/profile-split.sh [WORKLOAD...]   (set get batch-tx batch-pipe
#        ycsb-a; default: all five; also ping-1 and get-1, unpipelined as in
#        bench/compare-cpu.sh, commit, against servers that fsync every
#        write, and batch-tx-full, batch-pipe-full, after a fill of the
#        batch keys; env PEER_LOG=1, NO_BUILD=1)
# Prints, per workload, a table: bucket, Elsa ns/request, Redis ns/request.
source "$(dirname "$0")/lib.sh"
WORKLOADS=${*:-"set get batch-tx batch-pipe ycsb-a"}
command -v perf >/dev/null || { echo "needs perf (Debian linux-perf)"; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "needs 2 cores (server on one, client on the other)"; exit 1; }
[ -n "${NO_BUILD:-}" ] || build
ticks_hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
wait_ping() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.1; done; echo "no PING on $1" >&2; exit 1; }

# Starts server $1 (elsa|redis) on a fresh port: sets PORT and SPID.
start() {
  PORT=$(free_port)
  rm -rf "$TMP/$1"; mkdir -p "$TMP/$1"
  if [ "$1" = elsa ]; then
    taskset -c 0 "$ELSA" server --port "$PORT" --workers 1 --appendfsync "$FSYNC" --data-dir "$TMP/$1" >"$TMP/$1.log" 2>&1 &
  else
    local dur=(--save "" --appendonly no)
    [ -n "${PEER_LOG:-}" ] && dur=(--save "" --appendonly yes --appendfsync no --auto-aof-rewrite-percentage 0)
    [ "$FSYNC" = always ] && dur=(--save "" --appendonly yes --appendfsync always)
    taskset -c 0 redis-server --port "$PORT" "${dur[@]}" --dir "$TMP/$1" >"$TMP/$1.log" 2>&1 &
  fi
  SPID=$!; PIDS+=("$SPID")
  wait_ping "$PORT"
}

# The workload $1 against $PORT; prints the requests it made.
drive() {
  case $1 in
    set|get)
      taskset -c 1 redis-benchmark -p "$PORT" -q -P 16 -c 50 -r 1000000 -n 1000000 -t "$1" >/dev/null 2>&1
      echo 1000000 ;;
    batch-tx|batch-pipe|batch-tx-full|batch-pipe-full)
      local kind=tx; case $1 in batch-pipe*) kind=pipeline ;; esac
      taskset -c 1 "$ELSA" bench batch --op-type "$kind" --batch-size 6 --get-ratio 0.5 \
        --connections 64 --num-ops 50000 -u "redis://127.0.0.1:$PORT" -o "$TMP/out.json" >/dev/null 2>&1
      python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[-1]["operations"])' "$TMP/out.json" ;;
    ping-1|get-1)
      local t=${1%-1}; [ "$t" = ping ] && t=ping_mbulk
      taskset -c 1 redis-benchmark -p "$PORT" -q -c 16 -r 1000000 -n 300000 -t "$t" >/dev/null 2>&1
      echo 300000 ;;
    commit)
      taskset -c 1 "$ELSA" bench commit --threads 50 --num-ops 50000 \
        -u "redis://127.0.0.1:$PORT" -o "$TMP/out.json" >/dev/null 2>&1
      python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[-1]["operations"])' "$TMP/out.json" ;;
    ycsb-a)
      taskset -c 1 "$ELSA" bench ycsb run -P workloads/workloada -p operationcount=200000 \
        --threads 16 -u "redis://127.0.0.1:$PORT" >/dev/null 2>&1
      echo 200000 ;;
  esac
}

for w in $WORKLOADS; do
  # Cedar's commit test runs against servers that fsync every write.
  FSYNC=no; [ "$w" = commit ] && FSYNC=always
  for sys in elsa redis; do
    start "$sys"
    # GET reads keys that exist: a SET fill first, not measured (and YCSB
    # its load).
    case $w in get|get-1) drive set >/dev/null ;; esac
    # As bench/compare-cpu.sh's -full rows: the batch keys written first.
    case $w in *-full) taskset -c 1 "$ELSA" bench batch --op-type pipeline --batch-size 6 --get-ratio 0 \
      --seed 99 --connections 64 --num-ops 200000 -u "redis://127.0.0.1:$PORT" >/dev/null 2>&1 ;; esac
    [ "$w" = ycsb-a ] && taskset -c 1 "$ELSA" bench ycsb load -P workloads/workloada --threads 16 \
      -u "redis://127.0.0.1:$PORT" >/dev/null 2>&1
    perf record -q -e cpu-clock -F 999 -p "$SPID" -o "$TMP/$sys.data" 2>/dev/null &
    perf_pid=$!
    sleep 0.5
    t0=$(cpu_ticks "$SPID")
    reqs=$(drive "$w")
    t1=$(cpu_ticks "$SPID")
    kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
    ns=$(python3 -c "print(($t1 - $t0) / $ticks_hz * 1e9 / $reqs)")
    perf report -i "$TMP/$sys.data" --stdio --no-children --sort dso,sym -g none 2>/dev/null \
      | "$ROOT/bench/profile-split.py" "$sys" "$ns" >"$TMP/$w.$sys"
    echo "$w $sys: $(printf '%.0f' "$ns") ns of server CPU per request" >&2
    kill "$SPID"; wait "$SPID" 2>/dev/null || true
  done
  echo
  echo "### $w"
  echo
  echo "| bucket | Elsa ns/request | Redis ns/request |"
  echo "|---|---|---|"
  python3 - "$TMP/$w.elsa" "$TMP/$w.redis" <<'EOF'
import sys
def load(p):
    return {l.split("\t")[0]: float(l.split("\t")[1].split()[1]) for l in open(p) if l.strip()}
e, r = load(sys.argv[1]), load(sys.argv[2])
for k in sorted(set(e) | set(r), key=lambda k: -(e.get(k, 0) + r.get(k, 0))):
    print(f"| {k} | {e.get(k, 0):.0f} | {r.get(k, 0):.0f} |")
print(f"| **total** | **{sum(e.values()):.0f}** | **{sum(r.values()):.0f}** |")
EOF
done
