#!/usr/bin/env bash
# The paper's cross-region experiments (§5.4–§5.9, figs. 9–15) on a local
# emulated cluster: `elsa cluster up` starts REGIONS × NODES real processes
# whose peer links delay frames to other regions by RTT/2. One
# `elsa bench` process per region drives that region's first node; the
# figures add up the regions.
#
#   clients   throughput vs client threads per region        (figs. 9–10)
#   workers   throughput vs shard workers per node           (fig. 12)
#   rf        throughput vs replication factor per region    (fig. 13)
#   epoch     throughput and convergence lag vs merge epoch  (fig. 14)
#   2pc       CRDT vs replication = 2pc at RTT 50 ms         (fig. 15)
#   rtt       local commit p99 as RTT goes 0 → 200 ms
#   rejoin    a region cut off while others write: what anti-entropy ships
#
# Usage: bench/regions.sh [OUT] [EXPERIMENT ...]   (default: all)
# Writes OUT/regions.md, OUT/results.json, and charts (OUT/sweep-*.svg) with
# their tables in OUT/results.md.
# Knobs: REGIONS (4), NODES (2), DURATION per run in s (5), THREADS (8),
# RECORDS (10000), ZIPF (1; lower = less contention), WORKERS (1), RTT (50ms).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
ELSA=$ROOT/target/release/elsa
OUT=${1:-$ROOT/target/bench-results/regions}
shift || true
EXPERIMENTS=${*:-clients workers rf epoch 2pc rtt rejoin}
REGIONS=${REGIONS:-4}
NODES=${NODES:-2}
DURATION=${DURATION:-5}
THREADS=${THREADS:-8}
RECORDS=${RECORDS:-10000}
ZIPF=${ZIPF:-1}
WORKERS=${WORKERS:-1}
RTT=${RTT:-50ms}
command -v redis-cli >/dev/null || { echo "bench/regions.sh needs redis-cli (Debian: redis-tools)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/elsa-regions.XXXXXX)
CL=$TMP/cluster
# Below the kernel's ephemeral range (32768+), so client sockets of earlier
# runs cannot hold a port a node needs.
BASE=$((10000 + RANDOM % 8000))
mkdir -p "$OUT"
rm -f "$OUT/results.json"
echo "building target/release/elsa ..." >&2
cargo build --release --bin elsa >&2

down() { "$ELSA" cluster down --dir "$CL" --purge >/dev/null 2>&1 || true; }
trap 'down; rm -rf "$TMP"' EXIT

up() { # extra `cluster up` flags...
  down
  BASE=$((BASE + 2000 > 30000 ? 10000 + RANDOM % 1000 : BASE + 2000))
  "$ELSA" cluster up --regions "$REGIONS" --nodes-per-region "$NODES" --base-port "$BASE" \
    --dir "$CL" --workers "$WORKERS" --fresh "$@" >"$TMP/up.txt"
  # Wait until every node sees every member and has caught up (so no
  # primary moves during a run).
  local want=$((REGIONS * NODES))
  for i in $(seq 0 $((want - 1))); do
    for _ in $(seq 150); do
      redis-cli -p $((BASE + i)) info replication 2>/dev/null | tr -d '\r' |
        awk -v w="$want" '/^members:/ {m = ($0 == "members:" w)} /^catching_up:0/ {c = 1} END {exit !(m && c)}' && break
      sleep 0.1
    done
  done
}

region_port() { echo $((BASE + ($1 - 1) * NODES)); } # first node of region $1

# Runs `elsa bench $*` against the first node of every region at once;
# prints the summed throughput (committed transactions for ycsbt, ops
# otherwise), the worst p99 (us) over the regions and the mean abort rate
# (%). Each process writes its own result file (concurrent appends to one
# file would lose records); they are merged into results.json afterwards.
run_all() { # label workload args...
  local label=$1; shift
  local pids=()
  for r in $(seq 1 "$REGIONS"); do
    rm -f "$TMP/r$r.json"
    "$ELSA" bench "$@" -u "redis://127.0.0.1:$(region_port "$r")" --label "$label" \
      --output "$TMP/r$r.json" >"$TMP/r$r.txt" 2>/dev/null &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
  python3 - "$OUT/results.json" "$TMP"/r*.json <<'PY'
import json, os, sys
out, parts = sys.argv[1], sys.argv[2:]
runs = json.load(open(out)) if os.path.exists(out) else []
for p in (p for p in parts if os.path.exists(p)):
    runs += json.load(open(p))
json.dump(runs, open(out, "w"), indent=2)
PY
  local tput=0 p99=0 aborts=0
  for r in $(seq 1 "$REGIONS"); do
    # (grep finding nothing is not an error here: set -e and pipefail)
    t=$(grep -m1 -F 'Transactions(txn/sec)' "$TMP/r$r.txt" | awk -F', ' '{print $3}' || true)
    [ -n "$t" ] || t=$(grep -m1 -F 'Throughput(ops/sec)' "$TMP/r$r.txt" | awk -F', ' '{print $3}' || true)
    p=$(grep -E '99thPercentileLatency' "$TMP/r$r.txt" | awk -F', ' '{print $3}' | sort -n | tail -1 || true)
    a=$(grep -m1 -F 'AbortRate(%)' "$TMP/r$r.txt" | awk -F', ' '{print $3}' || true)
    tput=$(python3 -c "print(round(${tput} + ${t:-0}))")
    p99=$(python3 -c "print(max(${p99}, ${p:-0}))")
    aborts=$(python3 -c "print(${aborts} + ${a:-0} / $REGIONS)")
  done
  echo "$tput $p99 $(python3 -c "print(round($aborts, 1))")"
}

ycsbt() { run_all "$1" ycsbt --records "$RECORDS" --zipf "$ZIPF" --threads "$2" --txns 1000000 --duration "$DURATION"; }
commit() { run_all "$1" commit --threads "$2" --num-ops 10000000 --duration "$DURATION"; }
# Latency and lag are measured at a steady offered load (TARGET commits/s
# per region, coordinated-omission corrected), not at saturation: on a
# saturated machine every queue grows and p99 only measures the queues.
paced() { run_all "$1" commit --threads 4 --num-ops 10000000 --duration "$DURATION" --target "${TARGET:-500}"; }
load() { "$ELSA" bench ycsbt -u "redis://127.0.0.1:$(region_port 1)" --records "$RECORDS" --threads 1 --txns 1 >/dev/null 2>&1; }
shipped_total() { # lattices shipped by anti-entropy, summed over every node and peer
  local total=0 s
  for p in $(seq "$BASE" $((BASE + REGIONS * NODES - 1))); do
    s=$(redis-cli -p "$p" info replication | tr -d '\r' | grep -o 'ae_shipped=[0-9]*' | cut -d= -f2 | paste -sd+ | bc)
    total=$((total + ${s:-0}))
  done
  echo "$total"
}
info_field() { redis-cli -p "$1" info replication | tr -d '\r' | grep "^$2:" | cut -d: -f2; }

md=$OUT/regions.md
{
  echo "# Cross-region experiments"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(free -h | awk '/^Mem:/ {print $2}') RAM."
  echo "Cluster: $REGIONS regions × $NODES nodes on loopback, all on this machine; RTT between regions emulated in Elsa's peer transport."
  echo "Each run: $DURATION s; one bench process per region against its first node; YCSB-T zipf $ZIPF, $RECORDS records, 5-op SI transactions; commit = autocommit upserts."
  echo
} >"$md"

for e in $EXPERIMENTS; do
  case $e in
  clients)
    echo "## Throughput vs client threads per region (figs. 9–10), RTT $RTT" >>"$md"
    echo "| threads/region | committed txn/s (all regions) | worst region p99 (us) | abort rate % |" >>"$md"
    echo "|---:|---:|---:|---:|" >>"$md"
    up --rtt "$RTT"; load
    for t in 1 2 4 8 16; do
      read -r tp p99 ab < <(ycsbt "threads=$t" "$t")
      echo "| $t | $tp | $p99 | $ab |" >>"$md"; echo "clients $t: $tp txn/s" >&2
    done ;;
  workers)
    echo "## Throughput vs shard workers per node (fig. 12)" >>"$md"
    echo "| workers | committed txn/s | abort rate % |" >>"$md"; echo "|---:|---:|---:|" >>"$md"
    for w in 1 2; do
      WORKERS=$w up --rtt "$RTT"; load
      read -r tp _ ab < <(ycsbt "workers=$w" "$THREADS")
      echo "| $w | $tp | $ab |" >>"$md"; echo "workers $w: $tp" >&2
    done ;;
  rf)
    echo "## Throughput vs replication factor per region (fig. 13)" >>"$md"
    echo "| replication factor | committed txn/s | abort rate % |" >>"$md"; echo "|---:|---:|---:|" >>"$md"
    for k in 1 2; do
      up --rtt "$RTT" --replication-factor "$k"; load
      read -r tp _ ab < <(ycsbt "rf=$k" "$THREADS")
      echo "| $k | $tp | $ab |" >>"$md"; echo "rf $k: $tp" >&2
    done ;;
  epoch)
    # Lag is read at a steady offered load (a saturated run's lag only
    # measures queues); throughput at saturation comes from a second run.
    echo "## Merge epoch (fig. 14): saturated throughput, and convergence lag at ${TARGET:-500} commits/s per region (RTT $RTT)" >>"$md"
    echo "| epoch ms | saturated commits/s | lag p50 ms | lag p99 ms | bound: epoch + RTT/2 + 10 ms |" >>"$md"
    echo "|---:|---:|---:|---:|---:|" >>"$md"
    for ep in 10 50 100 500 1000; do
      up --rtt "$RTT" --merge-epoch-ms "$ep"
      paced "epoch=$ep paced" >/dev/null
      p50=$(info_field "$(region_port 2)" convergence_lag_p50_ms)
      p99=$(info_field "$(region_port 2)" convergence_lag_p99_ms)
      read -r tp _ _ < <(commit "epoch=$ep" "$THREADS")
      bound=$((ep + ${RTT%ms} / 2 + 10))
      echo "| $ep | $tp | $p50 | $p99 | $bound |" >>"$md"; echo "epoch $ep: $tp commits/s, lag p99 $p99" >&2
    done ;;
  2pc)
    echo "## CRDT vs replication = 2pc at RTT $RTT (fig. 15)" >>"$md"
    echo "| mode | commits/s | worst p99 (us) |" >>"$md"; echo "|---|---:|---:|" >>"$md"
    up --rtt "$RTT"
    read -r crdt c99 _ < <(commit "replication=crdt" "$THREADS")
    up --rtt "$RTT" --replication 2pc
    read -r tpc t99 _ < <(commit "replication=2pc" "$THREADS")
    echo "| crdt | $crdt | $c99 |" >>"$md"; echo "| 2pc | $tpc | $t99 |" >>"$md"
    echo "" >>"$md"; echo "CRDT / 2PC throughput ratio: $(python3 -c "print(round($crdt / max($tpc, 1e-9), 1))")×" >>"$md"
    echo "crdt $crdt 2pc $tpc" >&2 ;;
  rtt)
    echo "## Local commit latency as RTT grows (CRDT, ${TARGET:-500} commits/s per region)" >>"$md"
    echo "| RTT | commits/s | worst region p99 (us) |" >>"$md"; echo "|---|---:|---:|" >>"$md"
    for r in 0 50ms 100ms 200ms; do
      up --rtt "$r"
      read -r tp p99 _ < <(paced "rtt=$r")
      echo "| $r | $tp | $p99 |" >>"$md"; echo "rtt $r: p99 $p99" >&2
    done ;;
  rejoin)
    echo "## Rejoin after a partition ships only deltas" >>"$md"
    up --rtt "$RTT"
    # A base data set everyone has, then region r$REGIONS is cut off
    # while the others write a few keys.
    "$ELSA" bench commit -u "redis://127.0.0.1:$(region_port 1)" --threads 4 --num-ops 20000 >/dev/null 2>&1
    sleep 3
    cut=$(region_port "$REGIONS")
    for i in $(seq 0 $((NODES - 1))); do redis-cli -p $((cut + i)) elsa.fault isolate >/dev/null; done
    for i in $(seq 1 500); do echo "SET delta:$i v$i"; done | redis-cli -p "$(region_port 1)" >/dev/null
    sleep 2
    before=$(shipped_total)
    for i in $(seq 0 $((NODES - 1))); do redis-cli -p $((cut + i)) elsa.fault heal >/dev/null; done
    start=$(date +%s%N)
    until [ "$(redis-cli -p "$cut" get delta:500)" = v500 ]; do sleep 0.05; done
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    sleep 3
    shipped=$(($(shipped_total) - before))
    keys=$(redis-cli -p "$cut" dbsize)
    echo "Data set $keys keys; 500 written while region r$REGIONS was cut off." >>"$md"
    echo "After heal, r$REGIONS had the last of them in $ms ms; from heal on, anti-entropy shipped $shipped lattices over all nodes (a full copy to the region would be $((keys * NODES)))." >>"$md"
    echo "rejoin: $ms ms, shipped $shipped of $keys" >&2 ;;
  *) echo "unknown experiment $e" >&2; exit 2 ;;
  esac
  echo >>"$md"
done
# Runs are labelled `param=value [series]`, so `elsa bench plot` draws each
# experiment as a sweep chart (throughput and p99 vs the parameter).
"$ELSA" bench plot "$OUT/results.json" --out-dir "$OUT" >/dev/null || echo "elsa bench plot failed" >&2
echo "results: $md" >&2
cat "$md"
