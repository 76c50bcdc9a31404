#!/usr/bin/env bash
# Per-core speed, Elsa vs Redis (issue 18): each server pinned to core 0,
# every client pinned to core 1 (taskset), so a server's throughput is what
# one core of it does; the server's CPU seconds are read from
# /proc/PID/stat around each run, giving requests per CPU-second — the
# per-core figure, less sensitive to the client than throughput.
#
# Workloads (alternating Elsa and Redis, RUNS rounds each, medians):
#   set, get    redis-benchmark -P 16 -c 50 -r 1000000 -t set|get
#   ping-1, get-1  redis-benchmark -c 16 -t ping_mbulk|get, unpipelined (one
#               request per read and write, as YCSB's threads send): ping-1
#               is the floor every unpipelined command pays (I/O, runtime,
#               parse, reply), get-1 adds a lookup (of keys the set run
#               wrote when it comes after set in ONLY, e.g. ONLY="set get
#               ping-1 get-1"; of missing keys otherwise). Not in the
#               default ONLY
#   ycsb-a      elsa bench ycsb run -P workloads/workloada, 16 threads
#   batch-tx    elsa bench batch --op-type tx --batch-size 6 --get-ratio 0.5, 64 connections
#   batch-pipe  the same with --op-type pipeline
#   batch-tx-full, batch-pipe-full  the same against a key space that
#               already holds most of the batch keys (one unmeasured fill of
#               1.2M SETs over the 1M keys, before the first of them): no
#               table grows during the run, as YCSB runs after its load
#   set-cluster, get-cluster   set/get with redis-benchmark --cluster against
#               Elsa (a Redis Cluster client: each key's commands go to the
#               port of the worker that keeps it, `worker-port-base`); Redis,
#               one thread and not in cluster mode, runs plain set/get as
#               the reference (with WORKERS=1 Elsa runs them plain: one
#               worker is every key's worker, and redis-benchmark refuses a
#               cluster of one node)
#   batch-tag   batch-tx with each batch's keys under one hash tag
#               (`--tag-group 100`): Elsa commits each batch on one shard
#   batch-cluster  batch-tag sent as a Redis Cluster client would
#               (`elsa bench batch --cluster`: each batch to its slot's port;
#               Redis, not in cluster mode, runs batch-tag; one worker: plain)
#   commit      elsa bench commit, 50 threads, against servers that fsync
#               every write (Elsa --appendfsync always, Redis appendfsync always)
# The first five run against servers without durability (Elsa
# --appendfsync no, Redis without persistence), as issue 18's table. But
# Elsa's write-ahead log is on even then (written to the page cache once per
# batch, never synced); PEER_LOG=1 gives Redis the same work (an AOF with
# appendfsync no: written once per event loop, never synced by the server)
# for the like-for-like comparison. Its automatic rewrite is off: a rewrite
# forks, the child's CPU is not the server's, and the parent's
# copy-on-write faults fall in whichever run it overlaps (a 1.2M-SET fill
# passes the 64 MB threshold).
#
# Usage: bench/compare-cpu.sh [RUNS]   (env: WORKERS=1, N=1000000, ONLY="set get …", PEER_LOG=1,
#        SERVER_CPUS=0, CLIENT_CPUS=1: taskset lists; the scaling run gives
#        both 0,1 and WORKERS=2, so requests per CPU-second show what a
#        second worker adds per core, cross-shard messages included)
# Prints one line per run and a table of medians (Markdown, for
# docs/performance-log.md).
source "$(dirname "$0")/lib.sh"
RUNS=${1:-3}
WORKERS=${WORKERS:-1}
SERVER_CPUS=${SERVER_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
N=${N:-1000000}
ONLY=${ONLY:-"set get ycsb-a batch-tx batch-pipe commit"}
[ "$(nproc)" -ge 2 ] || { echo "needs 2 cores (server on one, client on the other)"; exit 1; }
[ -n "${NO_BUILD:-}" ] || build

ticks=$(getconf CLK_TCK)
# utime + stime of a process, in clock ticks (/proc/PID/stat fields 14, 15;
# the command name in field 2 has no spaces for these servers).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

wait_ping() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.1; done; echo "no PING on $1" >&2; exit 1; }

start_pair() { # durability: none|always -> sets EP RP EPID RPID
  EP=$(free_port); RP=$(free_port)
  local fsync=no redis_dur=(--save "" --appendonly no)
  if [ "$1" = always ]; then fsync=always; redis_dur=(--save "" --appendonly yes --appendfsync always)
  elif [ -n "${PEER_LOG:-}" ]; then redis_dur=(--save "" --appendonly yes --appendfsync no --auto-aof-rewrite-percentage 0); fi
  rm -rf "$TMP/elsa-$1" "$TMP/redis-$1"; mkdir -p "$TMP/redis-$1"
  WP=$(free_port)
  taskset -c "$SERVER_CPUS" "$ELSA" server --port "$EP" --workers "$WORKERS" --appendfsync "$fsync" \
    --worker-port-base "$WP" \
    --data-dir "$TMP/elsa-$1" >"$TMP/elsa-$1.log" 2>&1 &
  EPID=$!; PIDS+=("$EPID")
  taskset -c "$SERVER_CPUS" redis-server --port "$RP" "${redis_dur[@]}" --dir "$TMP/redis-$1" >"$TMP/redis-$1.log" 2>&1 &
  RPID=$!; PIDS+=("$RPID")
  wait_ping "$EP"; wait_ping "$RP"
}

stop_pair() { kill "$EPID" "$RPID" 2>/dev/null || true; wait "$EPID" "$RPID" 2>/dev/null || true; }

# A field of the last result `elsa bench -o FILE.json` wrote (a JSON array).
json_field() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d=d[-1] if isinstance(d,list) else d; print(d[sys.argv[2]])' "$1" "$2"
}
json_ops() { python3 -c "print(round($(json_field "$1" ops_per_sec)))"; }

# One measured run of workload $1 against port $2 (server PID $3):
# prints "ops_per_sec requests_per_cpu_second".
run_one() {
  local w=$1 port=$2 pid=$3 out="$TMP/run.json" ops
  rm -f "$out"
  local t0; t0=$(cpu_ticks "$pid")
  case $w in
    set|get|set-cluster|get-cluster)
      local t=${w%-cluster} mode=()
      # (redis-benchmark refuses a cluster of one node: with one worker,
      # every connection is on the key's worker anyway, so plain it is.)
      [ "$w" != "$t" ] && [ "$port" = "$EP" ] && [ "$WORKERS" -gt 1 ] && mode=(--cluster)
      ops=$(taskset -c "$CLIENT_CPUS" redis-benchmark "${mode[@]}" -p "$port" -q -P 16 -c 50 -r 1000000 -n "$N" -t "$t" 2>/dev/null \
        | tr '\r' '\n' | awk '/requests per second/ {print int($2)}' | tail -1) ;;
    ping-1|get-1)
      local t=${w%-1}; [ "$t" = ping ] && t=ping_mbulk
      ops=$(taskset -c "$CLIENT_CPUS" redis-benchmark -p "$port" -q -c 16 -r 1000000 -n $((N / 4)) -t "$t" 2>/dev/null \
        | tr '\r' '\n' | awk '/requests per second/ {print int($2)}' | tail -1) ;;
    ycsb-a)
      taskset -c "$CLIENT_CPUS" "$ELSA" bench ycsb run -P workloads/workloada -p operationcount=200000 \
        --threads 16 -u "redis://127.0.0.1:$port" -o "$out" >/dev/null
      ops=$(json_ops "$out") ;;
    batch-tx|batch-pipe|batch-tag|batch-cluster|batch-tx-full|batch-pipe-full)
      local kind=tx tag=0 mode=(); case $w in batch-pipe*) kind=pipeline ;; esac
      case $w in batch-tag|batch-cluster) tag=100 ;; esac
      [ "$w" = batch-cluster ] && [ "$port" = "$EP" ] && [ "$WORKERS" -gt 1 ] && mode=(--cluster)
      taskset -c "$CLIENT_CPUS" "$ELSA" bench batch --op-type "$kind" --batch-size 6 --get-ratio 0.5 --tag-group "$tag" "${mode[@]}" \
        --connections 64 --num-ops 50000 -u "redis://127.0.0.1:$port" -o "$out" >/dev/null
      ops=$(json_ops "$out") ;;
    commit)
      taskset -c "$CLIENT_CPUS" "$ELSA" bench commit --threads 50 --num-ops 50000 \
        -u "redis://127.0.0.1:$port" -o "$out" >/dev/null
      ops=$(json_ops "$out") ;;
  esac
  local t1; t1=$(cpu_ticks "$pid")
  # Requests the server answered per CPU-second it spent: the ops the
  # tool counts (a batch counts its commands) over the server's CPU time.
  local secs; secs=$(python3 -c "print(max(($t1 - $t0) / $ticks, 0.01))")
  local elapsed
  case $w in
    ping-1|get-1) elapsed=$(python3 -c "print($N / 4 / max($ops, 1))") ;;
    set*|get*) elapsed=$(python3 -c "print($N / max($ops, 1))") ;;
    *) elapsed=$(python3 -c "print($(json_field "$out" runtime_ms) / 1000)") ;;
  esac
  python3 -c "print($ops, round($ops * $elapsed / $secs))"
}

load_ycsb() { # port
  taskset -c "$CLIENT_CPUS" "$ELSA" bench ycsb load -P workloads/workloada --threads 16 -u "redis://127.0.0.1:$1" >/dev/null
}

# The batch keys, written once (unmeasured) before the -full workloads.
FILLED=0
fill_batch() {
  for port in "$EP" "$RP"; do
    taskset -c "$CLIENT_CPUS" "$ELSA" bench batch --op-type pipeline --batch-size 6 --get-ratio 0 --seed 99 \
      --connections 64 --num-ops 200000 -u "redis://127.0.0.1:$port" >/dev/null
  done
  FILLED=1
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2)? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A RESULT
measure() { # workload
  local w=$1 eo=() ec=() ro=() rc=()
  for i in $(seq "$RUNS"); do
    read -r o c <<<"$(run_one "$w" "$EP" "$EPID")"; eo+=("$o"); ec+=("$c")
    echo "$w run $i elsa : $o ops/s, $c per CPU-second" >&2
    read -r o c <<<"$(run_one "$w" "$RP" "$RPID")"; ro+=("$o"); rc+=("$c")
    echo "$w run $i redis: $o ops/s, $c per CPU-second" >&2
  done
  RESULT[$w]="$(median "${eo[@]}") $(median "${ro[@]}") $(median "${ec[@]}") $(median "${rc[@]}")"
}

echo "compare-cpu: server on cores $SERVER_CPUS, client on cores $CLIENT_CPUS; Elsa --workers $WORKERS; $RUNS rounds, alternating${PEER_LOG:+; Redis with an AOF, appendfsync no}" >&2
need_plain=0
for w in $ONLY; do [ "$w" != commit ] && need_plain=1; done
if [ "$need_plain" = 1 ]; then
  start_pair none
  case " $ONLY " in *" ycsb-a "*) load_ycsb "$EP"; load_ycsb "$RP" ;; esac
  for w in $ONLY; do
    case $w in *-full) [ "$FILLED" = 1 ] || fill_batch ;; esac
    [ "$w" != commit ] && measure "$w"
  done
  stop_pair
fi
case " $ONLY " in *" commit "*) start_pair always; measure commit; stop_pair ;; esac

echo
echo "| workload | Elsa ops/s | Redis ops/s | ratio | Elsa req/CPU-s | Redis req/CPU-s | per-core ratio |"
echo "|---|---|---|---|---|---|---|"
for w in $ONLY; do
  read -r eo ro ec rc <<<"${RESULT[$w]}"
  python3 -c "print(f'| $w | {int($eo):,} | {int($ro):,} | {$eo/$ro:.2f} | {int($ec):,} | {int($rc):,} | {$ec/$rc:.2f} |')"
done
